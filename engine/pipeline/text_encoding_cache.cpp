#include "pipeline/text_encoding_cache.h"

#include <cstring>

#include "core/error.h"
#include "core/memory.h"

namespace octodiff {

TextEncodingCache::TextEncodingCache(size_t capacity_rows) : capacity_(capacity_rows) {}

std::string text_row_key(const int32_t* ids, size_t count,
                         const std::vector<std::pair<int, const Tensor*>>& fixes, int skipped_layers) {
  // Self-delimiting (lengths first), so that keys of several rows can be concatenated.
  std::string key;
  const uint64_t lengths[3] = {count, fixes.size(), static_cast<uint64_t>(skipped_layers)};
  key.append(reinterpret_cast<const char*>(lengths), sizeof lengths);
  key.append(reinterpret_cast<const char*>(ids), count * sizeof(int32_t));
  for (const auto& [position, vectors] : fixes) {
    key.append(reinterpret_cast<const char*>(&position), sizeof position);
    const int64_t n = vectors->numel();
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(reinterpret_cast<const char*>(vectors->data()), static_cast<size_t>(n) * sizeof(float));
  }
  return key;
}

Tensor TextEncodingCache::rows(const std::vector<std::string>& keys, const Encode& encode) {
  if (keys.empty()) fail("internal: a text encoding of no rows");
  std::vector<Tensor> found(keys.size());
  std::vector<size_t> missing;                      // first index of each distinct key not held
  std::unordered_map<std::string, size_t> first;    // key → its index in `missing`'s batch
  std::vector<std::pair<size_t, size_t>> from_batch;  // (row, index into the encoded batch)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (auto it = entries_.find(keys[i]); it != entries_.end()) {
        it->second.last_use = ++clock_;
        found[i] = it->second.value;
        ++hits_;
        continue;
      }
      auto [at, inserted] = first.emplace(keys[i], missing.size());
      if (inserted) missing.push_back(i);
      from_batch.emplace_back(i, at->second);
    }
  }
  if (!missing.empty()) {
    const Tensor batch = encode(missing);
    if (batch.rank() != 3 || batch.dim(0) != static_cast<int64_t>(missing.size()))
      fail("internal: text encoding of ", missing.size(), " rows returned shape ", shape_str(batch.shape()));
    std::lock_guard<std::mutex> lock(mutex_);
    // Held rows come from the heap: the run's allocator is its plan's arena, which is trimmed or
    // destroyed while the cache lives on.
    const AllocatorScope heap(nullptr);
    for (size_t j = 0; j < missing.size(); ++j) {
      Tensor row = batch.slice0(static_cast<int64_t>(j), static_cast<int64_t>(j) + 1).clone();
      insert(keys[missing[j]], row);
      ++misses_;
    }
    for (const auto& [i, j] : from_batch) found[i] = batch.slice0(static_cast<int64_t>(j), static_cast<int64_t>(j) + 1);
  }
  const int64_t L = found[0].dim(1), H = found[0].dim(2);
  Tensor out = Tensor::empty({static_cast<int64_t>(keys.size()), L, H});
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i].dim(1) != L || found[i].dim(2) != H)
      fail("internal: text encodings of different shapes in one batch");
    std::memcpy(out.data() + static_cast<int64_t>(i) * L * H, found[i].data(), sizeof(float) * L * H);
  }
  return out;
}

void TextEncodingCache::insert(const std::string& key, Tensor value) {
  if (capacity_ == 0) return;
  while (entries_.size() >= capacity_) {  // evict the least recently used row
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    entries_.erase(oldest);
  }
  entries_[key] = Entry{std::move(value), ++clock_};
}

size_t TextEncodingCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}
size_t TextEncodingCache::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}
size_t TextEncodingCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace octodiff
