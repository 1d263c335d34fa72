// The text encoder's outputs for recently seen 77-token rows, so that a prompt or negative prompt
// met again — the next seed, a change of steps, guidance, scheduler or emphasis, the same prompt on
// every device of a grid — is not encoded again. Exact: a row's encoding does not depend on the
// other rows of its batch (every kernel's sums are per row, in a fixed order:
// TextEncodingCache.RowsEncodeAloneAsInABatch), so a row from the cache holds the bits the
// encoder would give. A row is keyed by what the encoder reads: its token ids and any
// textual-inversion vectors put in place of their rows (emphasis weights are applied after the
// encoder, so they are not part of it); SDXL keys a row by both towers' inputs and keeps both
// towers' outputs in one vector. One cache per pipeline, i.e. per model with its LoRAs.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace octodiff {

class TextEncodingCache {
 public:
  // Encodes rows (the given indices into the keys) as one batch: rows × L × H.
  using Encode = std::function<Tensor(const std::vector<size_t>& rows)>;

  explicit TextEncodingCache(size_t capacity_rows = kDefaultCapacityRows);

  // keys.size() × L × H: row i the encoding of keys[i] — from the cache, or from one call of
  // `encode` for the distinct keys it lacks (each encoded once however often it repeats). The
  // least recently used rows leave when more than the capacity are held. Safe to call from
  // several threads; `encode` runs without the lock held.
  Tensor rows(const std::vector<std::string>& keys, const Encode& encode);

  size_t hits() const;    // rows served from the cache so far
  size_t misses() const;  // rows encoded so far
  size_t size() const;    // rows held

  // 32 rows: 77 × 1024 floats each for SD 2's encoder (10 MB in all), 77 × (768 + 1280) + 1280 for
  // SDXL's two towers (20 MB).
  static constexpr size_t kDefaultCapacityRows = 32;

 private:
  struct Entry {
    Tensor value;  // L × H
    uint64_t last_use = 0;
  };
  void insert(const std::string& key, Tensor value);  // with mutex_ held

  const size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  uint64_t clock_ = 0;
  size_t hits_ = 0, misses_ = 0;
};

// A row's key: its ids, the text encoder's last layers not run (clip skip) and, for each
// textual-inversion fix, its position and vectors; keys are self-delimiting, so two rows' keys
// concatenated are the key of the pair.
std::string text_row_key(const int32_t* ids, size_t count,
                         const std::vector<std::pair<int, const Tensor*>>& fixes = {},
                         int skipped_layers = 0);

}  // namespace octodiff
