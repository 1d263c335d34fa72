#include "models/tiled_layers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/device.h"
#include "core/error.h"
#include "core/parallel.h"
#include "kernels/activations.h"

namespace octodiff {

// ---- File-backed scratch ------------------------------------------------------------------------

struct ActivationScratch::Mappings {
  std::mutex mutex;
  std::map<const float*, size_t> live;  // start → bytes
  int heap_fallbacks = 0;
};

namespace {

// An unlinked file of `bytes` (blocks reserved) in `dir`; -1 when that cannot be had.
int reserved_scratch_file(const std::filesystem::path& dir, size_t bytes) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::string path = (dir / "octodiff-vae-scratch-XXXXXX").string();
    fd = ::mkstemp(path.data());
    if (fd >= 0) ::unlink(path.c_str());
  }
  if (fd < 0) return -1;
  if (::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

ActivationScratch::ActivationScratch(std::filesystem::path dir)
    : dir_(std::move(dir)), mappings_(std::make_shared<Mappings>()) {}

ActivationScratch::~ActivationScratch() = default;

Tensor ActivationScratch::allocate(const Shape& shape) const {
  const size_t bytes = sizeof(float) * static_cast<size_t>(shape_numel(shape));
  const int fd = bytes > 0 ? reserved_scratch_file(dir_, bytes) : -1;
  void* p = fd >= 0 ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (fd >= 0) ::close(fd);  // the mapping keeps the (unlinked) file
  if (p == MAP_FAILED) {
    std::lock_guard lock(mappings_->mutex);
    ++mappings_->heap_fallbacks;
    return Tensor::empty(shape);
  }
  float* data = static_cast<float*>(p);
  {
    std::lock_guard lock(mappings_->mutex);
    mappings_->live[data] = bytes;
  }
  std::shared_ptr<const void> owner(p, [mappings = mappings_, bytes](const void* q) {
    {
      std::lock_guard lock(mappings->mutex);
      mappings->live.erase(static_cast<const float*>(q));
    }
    ::munmap(const_cast<void*>(q), bytes);
  });
  return Tensor::wrap(shape, data, std::move(owner));
}

void ActivationScratch::release_rows(const Tensor& t, int64_t y0, int64_t y1) const {
  y0 = std::max<int64_t>(y0, 0);
  y1 = std::min(y1, t.dim(1));
  if (y1 <= y0) return;
  {
    std::lock_guard lock(mappings_->mutex);
    if (!mappings_->live.count(t.data())) return;
  }
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const int64_t row = t.dim(2) * t.dim(3);
  for (int64_t n = 0; n < t.dim(0); ++n) {
    const auto begin = reinterpret_cast<uintptr_t>(t.data() + (n * t.dim(1) + y0) * row);
    const auto end = reinterpret_cast<uintptr_t>(t.data() + (n * t.dim(1) + y1) * row);
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }
}

int ActivationScratch::heap_fallbacks() const {
  std::lock_guard lock(mappings_->mutex);
  return mappings_->heap_fallbacks;
}

// ---- Tiles ------------------------------------------------------------------------------------

namespace {

// Rows [y0, y1) × columns [x0, x1) of an image.
struct Box {
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
  int64_t height() const { return y1 - y0; }
  int64_t width() const { return x1 - x0; }
  // Grown by `halo` on every side, clipped to an H × W image.
  Box grown(int64_t halo, int64_t H, int64_t W) const {
    return {std::max<int64_t>(0, y0 - halo), std::min(H, y1 + halo), std::max<int64_t>(0, x0 - halo),
            std::min(W, x1 + halo)};
  }
};

// The tiles of an H × W image, one row of tiles after another: fn(box) per tile, then
// row_done(y0, y1) once the tiles of rows [y0, y1) are done.
template <typename Fn, typename RowDone>
void for_each_tile(int64_t H, int64_t W, int64_t tile, Fn&& fn, RowDone&& row_done) {
  if (tile < 1) fail("internal: tile size ", tile);
  for (int64_t y = 0; y < H; y += tile) {
    const int64_t y1 = std::min(H, y + tile);
    for (int64_t x = 0; x < W; x += tile) {
      check_cancelled();
      fn(Box{y, y1, x, std::min(W, x + tile)});
    }
    row_done(y, y1);
  }
}

void release(const ActivationScratch* scratch, const Tensor& t, int64_t y0, int64_t y1) {
  if (scratch) scratch->release_rows(t, y0, y1);
}

Tensor allocate(const ActivationScratch* scratch, const Shape& shape) {
  return scratch ? scratch->allocate(shape) : Tensor::empty(shape);
}

// x[:, b, :] of an N × H × W × C tensor.
Tensor crop(const Tensor& x, const Box& b) {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  Tensor out = Tensor::empty({N, b.height(), b.width(), C});
  parallel_for(N * b.height(), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / b.height(), y = r % b.height();
      std::memcpy(out.data() + r * b.width() * C, x.data() + ((n * H + b.y0 + y) * W + b.x0) * C,
                  sizeof(float) * b.width() * C);
    }
  }, 16);
  return out;
}

// dst[:, at, :C] = src[:, from, :] (+ add[:, from, :] when given), C = src's channels: `from` a box of
// src's pixels, `at` one of dst's of the same size; dst's pixels may hold more channels than src's.
void paste(const Tensor& src, const Box& from, Tensor& dst, const Box& at, const Tensor* add = nullptr) {
  const int64_t H = dst.dim(1), W = dst.dim(2), Cd = dst.dim(3);
  const int64_t h = src.dim(1), w = src.dim(2), C = src.dim(3);
  parallel_for(dst.dim(0) * from.height(), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / from.height(), y = r % from.height();
      const int64_t s = ((n * h + from.y0 + y) * w + from.x0) * C;
      float* d = dst.data() + ((n * H + at.y0 + y) * W + at.x0) * Cd;
      for (int64_t x = 0; x < from.width(); ++x)
        for (int64_t c = 0; c < C; ++c)
          d[x * Cd + c] = add ? src.data()[s + x * C + c] + add->data()[s + x * C + c] : src.data()[s + x * C + c];
    }
  }, 16);
}

// SiLU(norm(x)) with the statistics `s` (of the whole tensor x is a crop of): the affine part per
// channel, then the kernels' vectorised SiLU.
Tensor norm_silu(const Tensor& x, const GroupNorm& norm, const GroupStatistics& s) {
  const int64_t N = x.dim(0), C = norm.channels, pixels = x.numel() / N / C, cg = C / norm.groups;
  Tensor y = Tensor::empty(x.shape());
  std::vector<float> a(N * C), b(N * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = n * norm.groups + c / cg;
      a[n * C + c] = static_cast<float>(s.rstd[g] * norm.gamma[c]);
      b[n * C + c] = static_cast<float>(norm.beta[c] - s.mean[g] * s.rstd[g] * norm.gamma[c]);
    }
  parallel_for(N * pixels, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* an = a.data() + (p / pixels) * C;
      const float* bn = b.data() + (p / pixels) * C;
      const float* src = x.data() + p * C;
      float* dst = y.data() + p * C;
      for (int64_t c = 0; c < C; ++c) dst[c] = src[c] * an[c] + bn[c];
    }
  }, 64);
  kernels::silu(y.data(), y.numel(), y.data());
  return y;
}

// conv(SiLU(norm(x))) at the pixels of `b` (N × b.height × b.width × out).
Tensor norm_silu_conv_tile(const Tensor& x, const GroupNorm& norm, const GroupStatistics& stats, const Conv2d& conv,
                           const Box& b) {
  const Box in = b.grown(conv.weight.kh / 2, x.dim(1), x.dim(2));
  const Tensor y = conv(norm_silu(crop(x, in), norm, stats));  // same padding: exact at the pixels of b, which are ≥ the halo from a cut edge
  return crop(y, {b.y0 - in.y0, b.y1 - in.y0, b.x0 - in.x0, b.x1 - in.x0});
}

void check_same_3x3_or_1x1(const Conv2d& conv) {
  const auto& g = conv.geometry;
  const int k = conv.weight.kh;
  if (conv.weight.kw != k || (k != 1 && k != 3) || !(g == kernels::Conv2dGeometry::same(k)))
    fail("internal: tiled layers run 1×1 and 3×3 same convolutions only");
}

// Σx and Σx² per (sample, row, group) of rows [y0, y1) into partial ([n][row][g][2]).
void row_sums(const Tensor& x, int64_t groups, int64_t y0, int64_t y1, std::vector<double>& partial) {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3), G = groups, cg = C / groups;
  const int64_t rows = y1 - y0;
  parallel_for(N * rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / rows, y = y0 + r % rows;
      double* out = partial.data() + (n * H + y) * G * 2;
      const float* row = x.data() + (n * H + y) * W * C;
      for (int64_t xx = 0; xx < W; ++xx)
        for (int64_t g = 0; g < G; ++g) {
          double sum = 0, squares = 0;
          for (const float* p = row + xx * C + g * cg; p < row + xx * C + (g + 1) * cg; ++p) {
            sum += *p;
            squares += static_cast<double>(*p) * *p;
          }
          out[2 * g] += sum;
          out[2 * g + 1] += squares;
        }
    }
  });
}

}  // namespace

GroupStatistics whole_group_statistics(const Tensor& x, int64_t groups, float eps, const ActivationScratch* scratch) {
  const int64_t N = x.dim(0), H = x.dim(1), G = groups, cg = x.dim(3) / groups;
  std::vector<double> partial(static_cast<size_t>(N * H * G * 2), 0.0);
  constexpr int64_t kBand = 32;  // rows summed before they are released
  for (int64_t y = 0; y < H; y += kBand) {
    row_sums(x, groups, y, std::min(H, y + kBand), partial);
    release(scratch, x, y, y + kBand);
  }
  GroupStatistics s;
  s.mean.assign(N * G, 0.0);
  s.rstd.assign(N * G, 0.0);
  const double count = static_cast<double>(H * x.dim(2) * cg);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double sum = 0, squares = 0;
      for (int64_t y = 0; y < H; ++y) {
        sum += partial[((n * H + y) * G + g) * 2];
        squares += partial[((n * H + y) * G + g) * 2 + 1];
      }
      const double mean = sum / count;
      s.mean[n * G + g] = mean;
      s.rstd[n * G + g] = 1.0 / std::sqrt(std::max(0.0, squares / count - mean * mean) + eps);
    }
  return s;
}

Tensor norm_silu_conv_in_tiles(const Tensor& x, const GroupNorm& norm, const GroupStatistics& stats,
                               const Conv2d& conv, int64_t tile, const ActivationScratch* scratch) {
  check_same_3x3_or_1x1(conv);
  const int64_t halo = conv.weight.kh / 2;
  Tensor y = allocate(scratch, {x.dim(0), x.dim(1), x.dim(2), conv.weight.out_channels});
  for_each_tile(
      x.dim(1), x.dim(2), tile,
      [&](const Box& b) { paste(norm_silu_conv_tile(x, norm, stats, conv, b), {0, b.height(), 0, b.width()}, y, b); },
      [&](int64_t y0, int64_t y1) {
        release(scratch, y, y0, y1);
        release(scratch, x, y0 - halo - tile, y1 - halo);  // rows the next tile row does not read
      });
  release(scratch, x, x.dim(1) - 2 * halo - tile, x.dim(1));
  return y;
}

namespace {

// out[:, :, :, :c] of an N × H × W × C tensor whose pixels hold their c channels first.
Tensor first_channels(const Tensor& x, int64_t c, const ActivationScratch* scratch) {
  const int64_t C = x.dim(3), H = x.dim(1), row = x.dim(2);
  Tensor y = allocate(scratch, {x.dim(0), H, row, c});
  constexpr int64_t kBand = 32;
  for (int64_t y0 = 0; y0 < H; y0 += kBand) {
    const int64_t y1 = std::min(H, y0 + kBand);
    parallel_for(x.dim(0) * (y1 - y0) * row, [&](int64_t p0, int64_t p1) {
      for (int64_t q = p0; q < p1; ++q) {
        const int64_t n = q / ((y1 - y0) * row), p = (n * H + y0) * row + q % ((y1 - y0) * row);
        std::memcpy(y.data() + p * c, x.data() + p * C, sizeof(float) * c);
      }
    }, 1024);
    release(scratch, x, y0, y1);
    release(scratch, y, y0, y1);
  }
  return y;
}

}  // namespace

Tensor resnet_in_tiles(const ResnetBlock2D& block, Tensor x, int64_t tile, const ActivationScratch* scratch) {
  if (block.has_time_embedding()) fail("internal: tiled resnets have no time embedding");
  check_same_3x3_or_1x1(block.conv2());
  const GroupNorm &norm1 = block.norm1(), &norm2 = block.norm2();
  const Tensor h = norm_silu_conv_in_tiles(x, norm1, whole_group_statistics(x, norm1.groups, norm1.eps, scratch),
                                           block.conv1(), tile, scratch);
  const GroupStatistics s2 = whole_group_statistics(h, norm2.groups, norm2.eps, scratch);
  // out = conv2(SiLU(norm2(h))) + shortcut(x): a tile's output needs x at its own pixels only, so it
  // goes over them (their first `out` channels when in > out, compacted below).
  for_each_tile(
      x.dim(1), x.dim(2), tile,
      [&](const Box& b) {
        const Tensor y = norm_silu_conv_tile(h, norm2, s2, block.conv2(), b);
        const Tensor xs = crop(x, b);
        const Tensor residual = block.shortcut() ? (*block.shortcut())(xs) : xs;
        paste(y, {0, b.height(), 0, b.width()}, x, b, &residual);
      },
      [&](int64_t y0, int64_t y1) {
        release(scratch, x, y0, y1);
        release(scratch, h, y0 - 1 - tile, y1 - 1);
      });
  const int64_t out = block.out_channels();
  if (x.dim(3) == out) return x;
  if (x.dim(3) < out) fail("internal: tiled resnets may not widen (", x.dim(3), " → ", out, " channels)");
  return first_channels(x, out, scratch);
}

Tensor upsample_in_tiles(const Upsample2D& upsample, const Tensor& x, int64_t tile, const ActivationScratch* scratch) {
  check_same_3x3_or_1x1(upsample.conv());
  const int64_t H = x.dim(1), W = x.dim(2), t = std::max<int64_t>(1, (tile + 1) / 2);
  Tensor y = allocate(scratch, {x.dim(0), 2 * H, 2 * W, upsample.conv().weight.out_channels});
  for_each_tile(
      H, W, t,
      [&](const Box& b) {
        // Output pixels 2b need the 2× copy one pixel around them: one input pixel of halo.
        const Box in = b.grown(1, H, W);
        const Tensor up = upsample(crop(x, in));
        paste(up, {2 * (b.y0 - in.y0), 2 * (b.y1 - in.y0), 2 * (b.x0 - in.x0), 2 * (b.x1 - in.x0)}, y,
              {2 * b.y0, 2 * b.y1, 2 * b.x0, 2 * b.x1});
      },
      [&](int64_t y0, int64_t y1) {
        release(scratch, y, 2 * y0, 2 * y1);
        release(scratch, x, y0 - 1 - t, y1 - 1);
      });
  return y;
}

}  // namespace octodiff
