// Tensor: a dense, row-major float32 array with a shape, sharing its storage on copy.
//
// Deliberately small: all compute lives in kernels/, which take raw pointers. Storage comes from
// the current device's allocator (core/device.h), so a compiled plan can serve activations from
// its arena without the models knowing.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace octodiff {

using Shape = std::vector<int64_t>;

// Product of the dimensions; throws on negative dimensions or overflow past 2^62.
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(Shape shape);  // uninitialised, 64-byte aligned
  static Tensor zeros(Shape shape);
  static Tensor full(Shape shape, float value);
  static Tensor from_vector(Shape shape, const std::vector<float>& values);
  // Wraps memory owned elsewhere; `owner` keeps it alive (e.g. a memory-mapped file).
  static Tensor wrap(Shape shape, float* data, std::shared_ptr<const void> owner);

  bool defined() const { return data_ != nullptr || numel() == 0; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }

  float* begin() { return data_; }
  float* end() { return data_ + numel_; }
  const float* begin() const { return data_; }
  const float* end() const { return data_ + numel_; }
  float& operator[](int64_t i) { return data_[i]; }
  float operator[](int64_t i) const { return data_[i]; }

  // Same storage, new shape (numel must match).
  Tensor reshaped(Shape shape) const;
  // View of rows [begin, end) along the first axis; shares storage.
  Tensor slice0(int64_t begin, int64_t end) const;
  // A new tensor of rows `rows` along the first axis, in that order (repeats allowed).
  Tensor gather0(const std::vector<int64_t>& rows) const;
  Tensor clone() const;

 private:
  std::shared_ptr<const void> storage_;
  float* data_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
};

}  // namespace octodiff
