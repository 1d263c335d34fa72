// Convolutional layers computed tile by tile over a whole NHWC tensor, giving what the layer
// gives on the whole tensor (to float32 rounding): the exact tiled VAE decode
// (AutoencoderKL::decode_up_in_tiles_nhwc) runs the decoder one layer at a time this way.
//
//   - a tile of a 3×3 convolution reads its input with a halo of 1 pixel (clipped to the tensor:
//     where the whole layer pads with zeros, the tile does too), so every output pixel is the
//     whole layer's;
//   - a GroupNorm normalises every tile with its input's statistics over the whole tensor,
//     summed in double over all pixels before the first tile (whole_group_statistics);
//   - only a layer's input and output are whole tensors; what a layer makes on the way (the
//     normalised input, a convolution's packing) is one tile's.
//
// Tiles are squares of `tile` pixels of the layer they run in (the last ones in a row or column
// smaller), processed in row-major order.
//
// With an ActivationScratch the whole tensors the layers make live in file-backed mappings, and
// each layer hands back to the kernel the rows of its input it has finished reading and of its
// output it has finished writing (the values stay in the file's page cache, written to disk under
// memory pressure, and come back when read): the process then holds a band of tile rows of each
// whole tensor at a time instead of all of it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "models/layers.h"
#include "models/unet_blocks.h"

namespace octodiff {

// File-backed whole tensors: one unlinked file per tensor in `dir` (space reserved up front, so a
// full disk is an allocation that falls back to the heap, never a fault while writing), mapped
// shared; the file disappears with the last Tensor sharing its mapping.
class ActivationScratch {
 public:
  explicit ActivationScratch(std::filesystem::path dir);
  ~ActivationScratch();
  ActivationScratch(const ActivationScratch&) = delete;
  ActivationScratch& operator=(const ActivationScratch&) = delete;

  // An uninitialised N × H × W × C tensor in a scratch file (on the heap when the folder cannot
  // hold it: counted in heap_fallbacks()).
  Tensor allocate(const Shape& shape) const;
  // Drops the whole pages of rows [y0, y1) (of every sample) of `t` from this process's memory,
  // when t lives in one of this scratch's files; nothing otherwise.
  void release_rows(const Tensor& t, int64_t y0, int64_t y1) const;
  int heap_fallbacks() const;

  struct Mappings;  // the live mappings (shared with their Tensors' owners)

 private:
  std::filesystem::path dir_;
  std::shared_ptr<Mappings> mappings_;
};

// Mean and 1/sqrt(var + eps) per (sample, group), N × groups each (sample-major).
struct GroupStatistics {
  std::vector<double> mean, rstd;
};

// Of x (N × H × W × C) over all its pixels: Σx and Σx² in double, rows summed in parallel into
// their own partial sums and added in row order (the result does not depend on the thread count).
// With `scratch`, x's rows are released as they are summed.
GroupStatistics whole_group_statistics(const Tensor& x, int64_t groups, float eps,
                                       const ActivationScratch* scratch = nullptr);

// conv(SiLU(norm(x))) (conv: 1×1 or 3×3, stride 1, same padding), with norm using `stats`.
// The output is allocated in `scratch` when given (else on the heap).
Tensor norm_silu_conv_in_tiles(const Tensor& x, const GroupNorm& norm, const GroupStatistics& stats,
                               const Conv2d& conv, int64_t tile, const ActivationScratch* scratch = nullptr);

// A resnet without time embedding (the VAE's): N × H × W × in → N × H × W × out. `x` is consumed:
// the output is written over its storage (each tile's output once that tile's input is read), so
// the block holds x and the inner activation h at full size, never x, h and the output at once.
// The caller must hold no other reference to x's storage.
Tensor resnet_in_tiles(const ResnetBlock2D& block, Tensor x, int64_t tile, const ActivationScratch* scratch = nullptr);

// Nearest 2× upsampling and its 3×3 convolution: N × H × W × C → N × 2H × 2W × C. Tiles of
// `tile` output pixels (⌈tile/2⌉ input pixels); the 2× copy is only ever a tile's.
Tensor upsample_in_tiles(const Upsample2D& upsample, const Tensor& x, int64_t tile,
                         const ActivationScratch* scratch = nullptr);

}  // namespace octodiff
