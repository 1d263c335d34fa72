#include "core/tensor.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/memory.h"

namespace octodiff {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("negative dimension in shape ", shape_str(shape));
    if (d != 0 && n > (int64_t{1} << 62) / d) fail("shape ", shape_str(shape), " is too large");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

Tensor Tensor::empty(Shape shape) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  auto block = allocate_floats(t.numel_);
  t.data_ = static_cast<float*>(const_cast<void*>(block.get()));
  t.storage_ = std::move(block);
  return t;
}

Tensor Tensor::zeros(Shape shape) { return full(std::move(shape), 0.0f); }

Tensor Tensor::full(Shape shape, float value) {
  Tensor t = empty(std::move(shape));
  std::fill(t.begin(), t.end(), value);
  return t;
}

Tensor Tensor::from_vector(Shape shape, const std::vector<float>& values) {
  Tensor t = empty(std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel_)
    fail("from_vector: ", values.size(), " values for shape ", shape_str(t.shape_));
  std::copy(values.begin(), values.end(), t.data_);
  return t;
}

Tensor Tensor::wrap(Shape shape, float* data, std::shared_ptr<const void> owner) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.storage_ = std::move(owner);
  return t;
}

int64_t Tensor::dim(int i) const {
  int r = rank();
  if (i < 0) i += r;
  if (i < 0 || i >= r) fail("dim(", i, ") of a tensor with shape ", shape_str(shape_));
  return shape_[i];
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel_)
    fail("cannot reshape ", shape_str(shape_), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || end < begin || end > shape_[0])
    fail("slice0(", begin, ", ", end, ") of shape ", shape_str(shape_));
  Tensor t = *this;
  int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  t.shape_[0] = end - begin;
  t.numel_ = row * (end - begin);
  t.data_ = data_ + row * begin;
  return t;
}

Tensor Tensor::gather0(const std::vector<int64_t>& rows) const {
  if (rank() == 0) fail("gather0 of a scalar");
  Shape shape = shape_;
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor t = empty(shape);
  const int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= shape_[0]) fail("gather0: row ", rows[i], " of shape ", shape_str(shape_));
    if (row) std::memcpy(t.data_ + static_cast<int64_t>(i) * row, data_ + rows[i] * row, sizeof(float) * row);
  }
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_);
  if (numel_) std::memcpy(t.data_, data_, sizeof(float) * numel_);
  return t;
}

}  // namespace octodiff
