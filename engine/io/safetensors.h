// safetensors: a validated, memory-mapped reader and a streaming writer.
//
// The format: an 8-byte little-endian header length N, N bytes of UTF-8 JSON mapping tensor
// names to {dtype, shape, data_offsets: [begin, end]} (plus an optional "__metadata__" map of
// strings), then the data. `open` enforces every rule of the format before any byte of tensor
// data is touched: N <= 100 MB and inside the file, a JSON object, known dtypes, dtype size ×
// shape == byte range, ranges sorted, contiguous, non-overlapping and covering the data exactly,
// all arithmetic overflow-checked. Anything else is an octodiff::Error naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace octodiff {

enum class DType { Bool, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
bool parse_dtype(std::string_view name, DType* out);

struct TensorRecord {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
  // A tensor stored in several runs of bytes (a Flax msgpack chunked leaf): each piece is a flat
  // run of this dtype, in order; begin/end are then unused (0). Empty for a contiguous tensor.
  std::vector<TensorRecord> pieces;
  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

class MappedFile;

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and validates the file; throws octodiff::Error naming the file and the rule broken.
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  // A view of another format's file (io/flax_msgpack.h) whose tensors are runs of bytes inside
  // `map`: record offsets count from the start of the file. The caller has validated them.
  static std::shared_ptr<SafetensorsFile> over_mapping(const std::filesystem::path& path,
                                                       std::shared_ptr<MappedFile> map,
                                                       std::vector<TensorRecord> tensors);

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorRecord>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const TensorRecord* find(std::string_view name) const;
  // Like find, but a missing tensor is an error naming it and this file.
  const TensorRecord& get(std::string_view name) const;
  // Raw little-endian bytes of a tensor (inside the mapping; valid while this object lives).
  const uint8_t* bytes(const TensorRecord& t) const;

  // Converts F32/F16/BF16/F64 data to a float32 tensor. F32 tensors are copied (aligned).
  Tensor to_f32(const TensorRecord& t) const;
  Tensor to_f32(std::string_view name) const { return to_f32(get(name)); }
  // The same conversion into dst (room for t.numel() floats).
  void to_f32_into(const TensorRecord& t, float* dst) const;
  // Integer tensors (any integer dtype, or Bool) widened to int64.
  std::vector<int64_t> to_i64(const TensorRecord& t) const;
  std::vector<int64_t> to_i64(std::string_view name) const { return to_i64(get(name)); }
  std::vector<double> to_f64(const TensorRecord& t) const;
  // An F32 tensor's data where it lies in the mapping (read-only), when it is float-aligned; else
  // nullptr (convert with to_f32). An error if the file no longer holds it. Packing reads weights
  // once, so it reads them from here instead of copying 4 GB out of the page cache first.
  const float* f32_in_place(const TensorRecord& t) const;
  // Drops the tensor's bytes from memory once they have been used (see MappedFile::release).
  void release(const TensorRecord& t) const;
  // Reads the whole file into the page cache in the background (MappedFile::read_ahead).
  void read_ahead() const;

  ~SafetensorsFile();

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  std::shared_ptr<MappedFile> map_;
  const uint8_t* data_ = nullptr;  // start of the data section
  uint64_t data_size_ = 0;
  std::vector<TensorRecord> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Validates a header (JSON text) against a data section of `data_size` bytes; used by `open`
// and exposed for tests. Throws octodiff::Error; `what` names the file in messages.
void parse_safetensors_header(std::string_view header, uint64_t data_size, const std::string& what,
                              std::vector<TensorRecord>* tensors,
                              std::map<std::string, std::string>* metadata);

// Streaming writer: declare every tensor, then `write` fills each one's bytes in order.
// The file appears atomically (written to a temporary name, then renamed); on any error the
// temporary file is removed and nothing is left at `path`.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  // Fills exactly nbytes at dst (called once, in declaration order).
  std::function<void(uint8_t* dst, size_t nbytes)> fill;
};

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Convenience for small files: float32 tensors written as F32.
void write_safetensors_f32(const std::filesystem::path& path,
                           const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

}  // namespace octodiff
