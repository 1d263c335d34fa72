#include "pipeline/tiled_decode.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"

namespace octodiff {

VaeTilingMode parse_vae_tiling_mode(const std::string& name) {
  if (name == "auto") return VaeTilingMode::Auto;
  if (name == "on") return VaeTilingMode::On;
  if (name == "off") return VaeTilingMode::Off;
  fail("unknown VAE tiling '", name, "' (expected 'auto', 'on' or 'off')");
}

std::string vae_tiling_mode_name(VaeTilingMode mode) {
  switch (mode) {
    case VaeTilingMode::Auto: return "auto";
    case VaeTilingMode::On: return "on";
    case VaeTilingMode::Off: return "off";
  }
  return "?";
}

void check_vae_tiling(const VaeTiling& t) {
  if (t.tile < kMinVaeTile)
    fail("VAE tile size ", t.tile, " latent pixels is too small (at least ", kMinVaeTile, ")");
  if (t.overlap < 1 || t.overlap > t.tile / 2)
    fail("VAE tile overlap ", t.overlap, " latent pixels must be between 1 and half the tile size (", t.tile / 2,
         ") so that neighbouring tiles blend");
}

// The measured activation memory behind kVaeDecodeBytesPerPixel (full-size random SD 1.5 VAE, f32, 2
// threads, `/usr/bin/time -v octodiff-bench --vae-tiling off|on --height 1024 --width 1024`, the
// VAE loaded alone): a whole 1024 × 1024 decode peaked at 2943 MB with 344 MB resident before it,
// i.e. ~2.6 GB of activations, ~2.5 kB per image pixel and growing with the pixels. In tiles of ≤ 512 pixels (the default) the same decode peaked at
// 861 MB (~0.52 GB of activations: one tile's, the whole latents' mid block and the output), and
// the tiles' share does not grow with the image.
bool vae_decode_uses_tiles(const VaeTiling& t, int64_t latent_height, int64_t latent_width, int scale,
                           int64_t batch, double memory_bytes) {
  check_vae_tiling(t);
  const bool larger_than_a_tile = latent_height > t.tile || latent_width > t.tile;
  switch (t.mode) {
    case VaeTilingMode::Off: return false;
    case VaeTilingMode::On: return larger_than_a_tile;
    case VaeTilingMode::Auto: {
      if (memory_bytes <= 0)
        memory_bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
      const double pixels = static_cast<double>(latent_height * scale) * static_cast<double>(latent_width * scale);
      const double whole_decode_bytes = kVaeDecodeBytesPerPixel * pixels * static_cast<double>(std::max<int64_t>(batch, 1));
      return larger_than_a_tile && whole_decode_bytes > kAutoTilingMemoryShare * memory_bytes;
    }
  }
  return false;
}

VaeTileGrid vae_tile_grid(int64_t length, int64_t max_tile, int64_t overlap) {
  if (length <= max_tile) return {length, {0}};
  const int64_t n = (length - overlap + (max_tile - overlap) - 1) / (max_tile - overlap);  // ≥ 2
  VaeTileGrid g;
  g.size = (length - overlap + n - 1) / n + overlap;
  const int64_t span = length - g.size;  // the last start
  for (int64_t i = 0; i < n; ++i) g.starts.push_back((i * span + (n - 1) / 2) / (n - 1));
  return g;
}

namespace {

// One side of the tile grid, in latent pixels, with what each tile owns and its blend ramp.
struct TileAxis {
  VaeTileGrid grid;
  std::vector<int64_t> own_begin, own_end;  // the owned part, relative to the tile's start
  std::vector<std::vector<float>> ramps;    // per tile, in image pixels
};

// A tile's blend weight at each of its image pixels along one side: 0 → 1 linearly, (k + ½)/b,
// across a band of b pixels centred on the boundary of what it owns with the previous tile, the
// mirror image at the boundary with the next, 1 between, 0 outside. Two neighbours' ramps over
// one band sum to 1; the band keeps (overlap − band)/2 latent pixels away from either tile's edge,
// where the tile's zero padding has changed its pixels.
std::vector<float> blend_ramp(int64_t size, int64_t own_begin, int64_t own_end, bool first, bool last, int64_t band) {
  std::vector<float> w(size, 1.0f);
  for (int64_t p = 0; p < size; ++p) {
    float v = 1.0f;
    if (!first) v = std::min(v, std::clamp((static_cast<float>(p - (own_begin - band / 2)) + 0.5f) / band, 0.0f, 1.0f));
    if (!last) v = std::min(v, std::clamp((static_cast<float>(own_end + band / 2 - p) - 0.5f) / band, 0.0f, 1.0f));
    w[p] = v;
  }
  return w;
}

TileAxis tile_axis(int64_t length, const VaeTiling& t, int64_t scale) {
  TileAxis a;
  a.grid = vae_tile_grid(length, t.tile, t.overlap);
  const auto& s = a.grid.starts;
  for (size_t i = 0; i < s.size(); ++i) {
    // Owned: from the middle of the overlap with the previous tile to that with the next.
    const int64_t begin = i == 0 ? 0 : (s[i] + s[i - 1] + a.grid.size) / 2;
    const int64_t end = i + 1 == s.size() ? length : (s[i + 1] + s[i] + a.grid.size) / 2;
    a.own_begin.push_back(begin - s[i]);
    a.own_end.push_back(end - s[i]);
    const int64_t band = std::max<int64_t>(1, t.overlap / 4) * scale;
    a.ramps.push_back(blend_ramp(a.grid.size * scale, a.own_begin.back() * scale, a.own_end.back() * scale, i == 0,
                                 i + 1 == s.size(), band));
  }
  return a;
}

// x[:, y0 : y0 + th, x0 : x0 + tw, :] of an N × H × W × C tensor.
Tensor crop_nhwc(const Tensor& x, int64_t y0, int64_t x0, int64_t th, int64_t tw) {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  Tensor out = Tensor::empty({N, th, tw, C});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t y = 0; y < th; ++y)
      std::memcpy(out.data() + ((n * th + y) * tw) * C, x.data() + ((n * H + y0 + y) * W + x0) * C,
                  sizeof(float) * tw * C);
  return out;
}

// Σx and Σx² per (sample, group) of one GroupNorm's input, and how many values they sum.
struct GroupSums {
  std::vector<double> sum, squares;  // N × G
  double count = 0;                  // per (sample, group)
};

// Σx and Σx² of x (N × H × W × C) over rows [y0, y1) and columns [x0, x1), per (sample, group),
// added to s. Rows run in parallel into their own partial sums, added in row order afterwards,
// so the result does not depend on the thread count.
void add_group_sums(const Tensor& x, int64_t groups, int64_t y0, int64_t y1, int64_t x0, int64_t x1, GroupSums& s) {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3), cg = C / groups, G = groups;
  const int64_t rows = y1 - y0;
  std::vector<double> partial(static_cast<size_t>(rows * N * G * 2), 0.0);  // [row][n][g][sum, squares]
  parallel_for(rows * N, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r % N, y = y0 + r / N;
      double* out = partial.data() + ((r / N) * N + n) * G * 2;
      for (int64_t xx = x0; xx < x1; ++xx) {
        const float* p = x.data() + ((n * H + y) * W + xx) * C;
        for (int64_t g = 0; g < G; ++g) {
          double sum = 0, squares = 0;
          for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
            sum += p[c];
            squares += static_cast<double>(p[c]) * p[c];
          }
          out[2 * g] += sum;
          out[2 * g + 1] += squares;
        }
      }
    }
  });
  s.sum.resize(N * G, 0.0);
  s.squares.resize(N * G, 0.0);
  s.count += static_cast<double>(rows * (x1 - x0) * cg);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < N * G; ++k) {
      s.sum[k] += partial[(r * N * G + k) * 2];
      s.squares[k] += partial[(r * N * G + k) * 2 + 1];
    }
}

void statistics_from(const GroupSums& s, float eps, std::vector<double>& mean, std::vector<double>& rstd) {
  mean.resize(s.sum.size());
  rstd.resize(s.sum.size());
  for (size_t g = 0; g < s.sum.size(); ++g) {
    mean[g] = s.sum[g] / s.count;
    const double var = std::max(0.0, s.squares[g] / s.count - mean[g] * mean[g]);
    rstd[g] = 1.0 / std::sqrt(var + eps);
  }
}

// The GroupNorms of the up blocks while one tile runs: the k-th GroupNorm of the tile adds its
// input's sums over the tile's owned part to gathered[k], and normalises with whole[k] (the
// previous pass's sums for the whole image) or, without them, with the tile's own statistics.
class TileStatistics final : public GroupNormStatistics {
 public:
  std::vector<GroupSums> gathered;
  const std::vector<GroupSums>* whole = nullptr;
  int64_t tile_height = 0;                     // latent pixels
  int64_t own_y0 = 0, own_y1 = 0, own_x0 = 0, own_x1 = 0;  // latent pixels, in the tile
  size_t call = 0;                             // GroupNorms run so far on this tile

  void statistics(const Tensor& x, int64_t groups, float eps, std::vector<double>& mean,
                  std::vector<double>& rstd) override {
    const int64_t r = x.dim(1) / tile_height;  // this layer's pixels per latent pixel
    if (gathered.size() <= call) gathered.resize(call + 1);
    add_group_sums(x, groups, own_y0 * r, own_y1 * r, own_x0 * r, own_x1 * r, gathered[call]);
    if (whole) {
      if (call >= whole->size()) fail("internal: the tiles ran different numbers of GroupNorms");
      statistics_from((*whole)[call], eps, mean, rstd);
    } else {
      GroupSums own;
      add_group_sums(x, groups, 0, x.dim(1), 0, x.dim(2), own);
      statistics_from(own, eps, mean, rstd);
    }
    ++call;
  }
};

// out += weight · tile and weights += weight over the tile's place (image pixels y0, x0).
void accumulate(const Tensor& tile, const std::vector<float>& wy, const std::vector<float>& wx, int64_t y0,
                int64_t x0, Tensor& out, std::vector<float>& weights) {
  const int64_t N = out.dim(0), H = out.dim(1), W = out.dim(2), C = out.dim(3);
  const int64_t th = tile.dim(1), tw = tile.dim(2);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t y = 0; y < th; ++y)
      for (int64_t x = 0; x < tw; ++x) {
        const float w = wy[y] * wx[x];
        const float* src = tile.data() + ((n * th + y) * tw + x) * C;
        float* dst = out.data() + ((n * H + y0 + y) * W + x0 + x) * C;
        for (int64_t c = 0; c < C; ++c) dst[c] += w * src[c];
        if (n == 0) weights[(y0 + y) * W + x0 + x] += w;
      }
}

// Runs the up blocks on every tile of `mid` with `stats` installed; `fn(i, j, image tile)` gets
// each tile's output. Returns the sums gathered.
template <typename Fn>
std::vector<GroupSums> over_tiles(const AutoencoderKL& vae, const Tensor& mid, const TileAxis& rows,
                                  const TileAxis& cols, const std::vector<GroupSums>* whole, Fn&& fn) {
  TileStatistics stats;
  stats.whole = whole;
  stats.tile_height = rows.grid.size;
  for (size_t i = 0; i < rows.grid.starts.size(); ++i)
    for (size_t j = 0; j < cols.grid.starts.size(); ++j) {
      stats.call = 0;
      stats.own_y0 = rows.own_begin[i];
      stats.own_y1 = rows.own_end[i];
      stats.own_x0 = cols.own_begin[j];
      stats.own_x1 = cols.own_end[j];
      const Tensor crop = crop_nhwc(mid, rows.grid.starts[i], cols.grid.starts[j], rows.grid.size, cols.grid.size);
      GroupNormStatisticsScope scope(&stats);
      fn(i, j, vae.decode_up_nhwc(crop));
    }
  return std::move(stats.gathered);
}

// Passes that gather the GroupNorm sums before the one that makes the image. A pass makes the
// sums of one more GroupNorm exact (its inputs then only depend on exact statistics), but mixes
// exact and estimated statistics in the later ones: on the tiny random VAE of the tests the image
// was furthest from the whole decode after 2 and 4 passes (max error 0.049 → 0.078 → 0.081 at
// tile 56, overlap 28), closest after one (and one pass beats each tile's own statistics:
// 0.035 vs 0.049 at tile 60/overlap 30, 0.037 vs 0.072 at 64/16 on 128 × 128 latents).
constexpr int kStatisticsPasses = 1;

}  // namespace

Tensor tiled_decode_nhwc(const AutoencoderKL& vae, const Tensor& z, const VaeTiling& t) {
  check_vae_tiling(t);
  const Tensor mid = vae.decode_mid_nhwc(z);  // checks z's shape
  const int64_t scale = vae.config().scale_factor();
  const int64_t N = z.dim(0), h = z.dim(1), w = z.dim(2), C = vae.config().out_channels;
  const TileAxis rows = tile_axis(h, t, scale), cols = tile_axis(w, t, scale);
  // Pass 1: the whole image's GroupNorm sums, estimated. Pass 2: the image, normalised with them.
  auto nothing = [](size_t, size_t, const Tensor&) {};
  std::vector<GroupSums> whole = over_tiles(vae, mid, rows, cols, nullptr, nothing);
  for (int pass = 1; pass < kStatisticsPasses; ++pass) whole = over_tiles(vae, mid, rows, cols, &whole, nothing);
  Tensor out = Tensor::zeros({N, h * scale, w * scale, C});
  std::vector<float> weights(static_cast<size_t>(h * scale * w * scale), 0.0f);
  over_tiles(vae, mid, rows, cols, &whole, [&](size_t i, size_t j, const Tensor& tile) {
    accumulate(tile, rows.ramps[i], cols.ramps[j], rows.grid.starts[i] * scale, cols.grid.starts[j] * scale, out,
               weights);
  });
  const int64_t HW = h * scale * w * scale;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < HW; ++p)
      for (int64_t c = 0; c < C; ++c) out.data()[(n * HW + p) * C + c] /= weights[p];
  return out;
}

}  // namespace octodiff
