// .npy files (NumPy format 1.0/2.0/3.0): float32, little-endian, C order — what --latents,
// --save-latents and --save-array exchange with Python users.
#pragma once

#include <filesystem>

#include "core/tensor.h"

namespace octodiff {

// Reads a float32 (or float64/float16, converted) C-order array; anything else is a clear error.
Tensor read_npy(const std::filesystem::path& path);
// Writes version 1.0 '<f4' C-order, atomically.
void write_npy(const std::filesystem::path& path, const Tensor& t);

}  // namespace octodiff
