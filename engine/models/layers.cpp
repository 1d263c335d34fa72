#include "models/layers.h"

#include <cmath>
#include <cstring>

#include "core/arena.h"
#include "core/error.h"
#include "core/parallel.h"
#include "io/weight_cache.h"
#include "kernels/activations.h"
#include "kernels/norm.h"
#include "kernels/tensor_ops.h"

namespace octodiff {

namespace {

struct LayerScopeState {
  PackedLayers* record = nullptr;
  const PackedLayers* reuse = nullptr;
  PackedLayerStats* stats = nullptr;
};
thread_local LayerScopeState t_layers;

void count(int PackedLayerStats::*field) {
  if (t_layers.stats) ++(t_layers.stats->*field);
}

std::string layer_key(const std::vector<std::pair<std::string, Shape>>& tensors) {
  std::string key;
  for (const auto& [name, shape] : tensors) key += (key.empty() ? "" : "+") + name;
  return key;
}

// The packed weight an earlier load made of the same, unpatched tensors (or nullptr).
const kernels::PackedMatrix* reusable(const WeightSource& w, const std::string& key,
                                      const std::vector<std::pair<std::string, Shape>>& tensors, int64_t K, int64_t N,
                                      kernels::Precision precision) {
  if (!t_layers.reuse) return nullptr;
  for (const auto& [name, shape] : tensors)
    if (w.patched(name)) return nullptr;
  auto it = t_layers.reuse->matrices.find(key);
  if (it == t_layers.reuse->matrices.end()) return nullptr;
  const kernels::PackedMatrix& m = it->second;
  return m.K() == K && m.N() == N && m.precision() == precision ? &m : nullptr;
}

CachingArena& packing_scratch() {
  thread_local CachingArena arena;
  return arena;
}

// A weight matrix packed for the kernels: from the component's weight cache when one is being
// read (the listed tensors are then only checked, never read), else read and packed by `pack`.
// With a PackedLayersScope: shared with an earlier load when its tensors are unpatched.
template <typename Pack>
kernels::PackedMatrix packed_weight_uncounted(WeightSource& w, const std::vector<std::pair<std::string, Shape>>& tensors,
                                              int64_t K, int64_t N, kernels::Precision precision, Pack pack) {
  WeightCacheFile* cache = active_weight_cache();
  if (!cache || !cache->reading()) {
    const AllocatorScope scratch(&packing_scratch());  // the packed result is weight storage
    count(&PackedLayerStats::packed);
    return pack();
  }
  for (const auto& [name, shape] : tensors) w.claim(name, shape);
  const std::string tag = kernels::packed_tag(K, N, precision);
  const size_t bytes = kernels::packed_size(K, N, precision);
  count(&PackedLayerStats::from_cache);
  return kernels::PackedMatrix::adopt(K, N, precision, cache->next(bytes, tag), bytes);
}

template <typename Pack>
kernels::PackedMatrix packed_weight(WeightSource& w, const std::vector<std::pair<std::string, Shape>>& tensors,
                                    int64_t K, int64_t N, kernels::Precision precision, Pack pack) {
  const std::string key = t_layers.record || t_layers.reuse ? layer_key(tensors) : std::string();
  kernels::PackedMatrix m;
  if (const kernels::PackedMatrix* earlier = reusable(w, key, tensors, K, N, precision)) {
    for (const auto& [name, shape] : tensors) w.claim(name, shape);
    count(&PackedLayerStats::reused);
    m = *earlier;
  } else {
    m = packed_weight_uncounted(w, tensors, K, N, precision, pack);
  }
  if (t_layers.record) t_layers.record->matrices[key] = m;
  return m;
}

Tensor stored_tensor_uncounted(WeightSource& w, const std::string& name, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const std::string tag = "f32 " + shape_str(shape);
  WeightCacheFile* cache = active_weight_cache();
  if (cache && cache->reading()) {
    w.claim(name, shape);
    std::shared_ptr<void> data = cache->next(bytes, tag);
    return Tensor::wrap(shape, static_cast<float*>(data.get()), data);
  }
  if (!cache) return w.take(name, shape);
  std::shared_ptr<void> data = allocate_weight_bytes(bytes, tag);
  w.take_into(name, shape, static_cast<float*>(data.get()));
  return Tensor::wrap(shape, static_cast<float*>(data.get()), data);
}

}  // namespace

Tensor stored_tensor(WeightSource& w, const std::string& name, const Shape& shape) {
  const Tensor* earlier = nullptr;
  if (t_layers.reuse && !w.patched(name)) {
    auto it = t_layers.reuse->stored.find(name);
    if (it != t_layers.reuse->stored.end() && it->second.shape() == shape) earlier = &it->second;
  }
  Tensor t;
  if (earlier) {
    w.claim(name, shape);
    t = *earlier;
  } else {
    t = stored_tensor_uncounted(w, name, shape);
  }
  if (t_layers.record) t_layers.record->stored[name] = t;
  return t;
}

PackedLayersScope::PackedLayersScope(PackedLayers* record, const PackedLayers* reuse, PackedLayerStats* stats)
    : record_(t_layers.record), reuse_(t_layers.reuse), stats_(t_layers.stats) {
  t_layers = {record, reuse, stats};
}

PackedLayersScope::~PackedLayersScope() { t_layers = {record_, reuse_, stats_}; }

std::vector<float> to_vector(const Tensor& t) { return std::vector<float>(t.begin(), t.end()); }

void release_packing_scratch() { packing_scratch().trim(); }

Linear Linear::load(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, bool has_bias,
                    kernels::Precision precision, bool from_conv1x1) {
  Linear l;
  l.in = in;
  l.out = out;
  Shape shape = from_conv1x1 ? Shape{out, in, 1, 1} : Shape{out, in};
  l.weight = packed_weight(w, {{prefix + ".weight", shape}}, in, out, precision, [&] {
    Tensor weight = w.take_to_read(prefix + ".weight", shape);
    return kernels::pack_b(weight.data(), in, out, /*transposed=*/true, precision);
  });
  if (has_bias) l.bias = to_vector(w.take(prefix + ".bias", {out}));
  return l;
}

Linear Linear::load_fused(WeightSource& w, const std::vector<std::string>& prefixes, int64_t in,
                          int64_t out_each, bool has_bias, kernels::Precision precision) {
  const int64_t parts = static_cast<int64_t>(prefixes.size());
  Linear l;
  l.in = in;
  l.out = out_each * parts;
  std::vector<std::pair<std::string, Shape>> tensors;
  for (const auto& prefix : prefixes) tensors.push_back({prefix + ".weight", {out_each, in}});
  l.weight = packed_weight(w, tensors, in, l.out, precision, [&] {
    Tensor stacked = Tensor::empty({l.out, in});  // torch layout (out, in): rows are outputs
    for (int64_t p = 0; p < parts; ++p) {
      Tensor part = w.take_to_read(tensors[p].first, tensors[p].second);
      std::memcpy(stacked.data() + p * out_each * in, part.data(), sizeof(float) * out_each * in);
    }
    return kernels::pack_b(stacked.data(), in, l.out, /*transposed=*/true, precision);
  });
  if (has_bias) {
    for (const auto& prefix : prefixes) {
      Tensor b = w.take(prefix + ".bias", {out_each});
      l.bias.insert(l.bias.end(), b.begin(), b.end());
    }
  }
  return l;
}

namespace {

thread_local int64_t t_guided_pairs_batch = 0;

bool takes_pairs(const Tensor& x, kernels::Precision precision) {
  return x.rank() >= 1 && takes_guided_pairs(x.dim(0), precision);
}

// d = c − u over n values, in parallel (element by element: the same bits for any thread count).
void difference(const float* u, const float* c, int64_t n, float* d) {
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) d[k] = c[k] - u[k];
  }, 1 << 14);
}

// The pairs' second half: y_d (rows × channels) = W·δ + bias + r_c becomes W·x_u + W·δ + bias + r_c
// by adding y_u − bias − r_u (y_u: the first half's W·x_u + bias + r_u).
void add_first_half_products(const float* y_u, const float* r_u, const float* bias, int64_t rows, int64_t channels,
                             float* y_d) {
  parallel_for(rows, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t o = row * channels;
      for (int64_t j = 0; j < channels; ++j) {
        float product = y_u[o + j];
        if (r_u) product -= r_u[o + j];
        if (bias) product -= bias[j];
        y_d[o + j] += product;
      }
    }
  }, std::max<int64_t>(1, (1 << 14) / channels));
}

}  // namespace

ScopedGuidedPairs::ScopedGuidedPairs(int64_t batch) : previous_(t_guided_pairs_batch) {
  t_guided_pairs_batch = batch;
}
ScopedGuidedPairs::~ScopedGuidedPairs() { t_guided_pairs_batch = previous_; }
bool takes_guided_pairs(int64_t samples, kernels::Precision precision) {
  return t_guided_pairs_batch > 0 && samples == t_guided_pairs_batch && samples % 2 == 0 &&
         precision == kernels::Precision::BF16;
}

Tensor Linear::operator()(const Tensor& x, const Tensor* residual) const {
  if (x.rank() < 1 || x.dim(-1) != in)
    fail("internal: Linear(", in, "->", out, ") applied to shape ", shape_str(x.shape()));
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = Tensor::empty(out_shape);
  const int64_t rows = x.numel() / in;
  kernels::Epilogue ep;
  ep.bias = bias.empty() ? nullptr : bias.data();
  if (residual) {
    if (residual->shape() != out_shape) fail("internal: Linear residual shape mismatch");
    ep.residual = residual->data();
    ep.ldr = out;
  }
  if (takes_pairs(x, weight.precision())) {
    const int64_t half = rows / 2;
    const float* r = residual ? residual->data() : nullptr;
    forward_pair(x.data(), x.data() + half * in, half, y.data(), y.data() + half * out, r, r ? r + half * out : nullptr);
    return y;
  }
  kernels::gemm(x.data(), rows, in, weight, y.data(), out, ep);
  return y;
}

void Linear::forward(const float* x, int64_t rows, float* y, const float* residual) const {
  kernels::Epilogue ep;
  ep.bias = bias.empty() ? nullptr : bias.data();
  if (residual) {
    ep.residual = residual;
    ep.ldr = out;
  }
  kernels::gemm(x, rows, in, weight, y, out, ep);
}

void Linear::forward_pair(const float* xu, const float* xc, int64_t n, float* yu, float* yc,
                          const float* residual_u, const float* residual_c) const {
  forward(xu, n, yu, residual_u);
  if (weight.precision() != kernels::Precision::BF16) {
    forward(xc, n, yc, residual_c);
    return;
  }
  Tensor d = Tensor::empty({n, in});
  difference(xu, xc, n * in, d.data());
  forward(d.data(), n, yc, residual_c);
  add_first_half_products(yu, residual_u, bias.empty() ? nullptr : bias.data(), n, out, yc);
}

Conv2d Conv2d::load(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, int k,
                    kernels::Conv2dGeometry geometry, kernels::Precision precision, bool has_bias) {
  return load_as(w, prefix, in, out, k, geometry, precision, has_bias,
                 kernels::conv2d_algorithm(out, in, k, k, geometry, precision));
}

Conv2d Conv2d::load_after_upsample(WeightSource& w, const std::string& prefix, int64_t in, int64_t out,
                                   kernels::Precision precision, bool has_bias) {
  return load_as(w, prefix, in, out, 3, kernels::Conv2dGeometry::same(3), precision, has_bias,
                 kernels::conv2d_upsample2x_algorithm(out, in, precision));
}

Conv2d Conv2d::load_as(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, int k,
                       kernels::Conv2dGeometry geometry, kernels::Precision precision, bool has_bias,
                       kernels::ConvAlgorithm algorithm) {
  Conv2d c;
  c.geometry = geometry;
  const Shape shape{out, in, k, k};
  c.weight.out_channels = out;
  c.weight.in_channels = in;
  c.weight.kh = c.weight.kw = k;
  c.weight.algorithm = algorithm;
  const int64_t rows = kernels::conv2d_packed_rows(in, k, k, algorithm);
  const int64_t columns = kernels::conv2d_packed_columns(out, algorithm);
  c.weight.packed = packed_weight(w, {{prefix + ".weight", shape}}, rows, columns, precision, [&] {
    Tensor weight = w.take_to_read(prefix + ".weight", shape);
    return kernels::pack_conv2d(weight.data(), nullptr, out, in, k, k, precision, algorithm).packed;
  });
  if (has_bias) c.weight.bias = to_vector(w.take(prefix + ".bias", {out}));
  return c;
}

Tensor Conv2d::operator()(const Tensor& x, const Tensor* residual, bool relu) const {
  return apply(x, residual, relu, /*upsample=*/false);
}

Tensor Conv2d::upsampled(const Tensor& x, const Tensor* residual, bool relu) const {
  return apply(x, residual, relu, /*upsample=*/true);
}

Tensor Conv2d::apply(const Tensor& x, const Tensor* residual, bool relu, bool upsample) const {
  if (x.rank() != 4 || x.dim(3) != weight.in_channels)
    fail("internal: Conv2d(", weight.in_channels, "->", weight.out_channels, ") applied to shape ",
         shape_str(x.shape()));
  const int64_t N = x.dim(0), H = upsample ? 2 * x.dim(1) : x.dim(1), W = upsample ? 2 * x.dim(2) : x.dim(2);
  const int64_t Ho = kernels::conv2d_out_size(H, weight.kh, geometry.stride, geometry.pad_top, geometry.pad_bottom);
  const int64_t Wo = kernels::conv2d_out_size(W, weight.kw, geometry.stride, geometry.pad_left, geometry.pad_right);
  Tensor y = Tensor::empty({N, Ho, Wo, weight.out_channels});
  if (residual && residual->shape() != y.shape()) fail("internal: Conv2d residual shape mismatch");
  if (upsample && !(geometry == kernels::Conv2dGeometry::same(3)))
    fail("internal: an upsampling Conv2d with another geometry than 3x3 same");
  // One call of the kernel on n samples of x (from `in`) into y (at `out`).
  const auto conv = [&](const float* in, int64_t n, float* out, const float* res, bool fused_relu) {
    if (upsample)
      kernels::conv2d_upsample2x_nhwc(in, n, x.dim(1), x.dim(2), weight, out, res, fused_relu);
    else
      kernels::conv2d_nhwc(in, n, H, W, weight, geometry, out, res, fused_relu);
  };
  if (takes_pairs(x, weight.packed.precision())) {  // layers.h: ScopedGuidedPairs, as Linear::forward_pair
    // (Upsampling commutes with the difference: the pairs of the upsampled image are its upsampled pairs.)
    const int64_t in_half = x.numel() / 2, out_half = y.numel() / 2;
    const float* r = residual ? residual->data() : nullptr;
    conv(x.data(), N / 2, y.data(), r, false);
    Tensor d = Tensor::empty({N / 2, x.dim(1), x.dim(2), weight.in_channels});
    difference(x.data(), x.data() + in_half, in_half, d.data());
    conv(d.data(), N / 2, y.data() + out_half, r ? r + out_half : nullptr, false);
    add_first_half_products(y.data(), r, weight.bias.empty() ? nullptr : weight.bias.data(),
                            out_half / weight.out_channels, weight.out_channels, y.data() + out_half);
    if (relu) kernels::relu(y.data(), y.numel(), y.data());
    return y;
  }
  conv(x.data(), N, y.data(), residual ? residual->data() : nullptr, relu);
  return y;
}

GroupNorm GroupNorm::load(WeightSource& w, const std::string& prefix, int64_t channels, int64_t groups,
                          float eps) {
  GroupNorm g;
  g.channels = channels;
  g.groups = groups;
  g.eps = eps;
  g.gamma = to_vector(w.take(prefix + ".weight", {channels}));
  g.beta = to_vector(w.take(prefix + ".bias", {channels}));
  return g;
}

namespace {

thread_local GroupNormStatistics* t_group_norm_statistics = nullptr;

// y = (x − mean) · rstd · gamma + beta (then SiLU) with the given statistics, N × groups.
void group_norm_with(const Tensor& x, const GroupNorm& norm, const std::vector<double>& mean,
                     const std::vector<double>& rstd, bool silu, Tensor& y) {
  const int64_t N = x.dim(0), C = norm.channels, per_sample = x.numel() / N / C, cg = C / norm.groups;
  std::vector<float> a(C), b(C);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = n * norm.groups + c / cg;
      a[c] = static_cast<float>(rstd[g] * norm.gamma[c]);
      b[c] = static_cast<float>(norm.beta[c] - mean[g] * rstd[g] * norm.gamma[c]);
    }
    const float* src = x.data() + n * per_sample * C;
    float* dst = y.data() + n * per_sample * C;
    parallel_for(per_sample, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t c = 0; c < C; ++c) {
          const float v = src[p * C + c] * a[c] + b[c];
          dst[p * C + c] = silu ? v / (1.0f + std::exp(-v)) : v;
        }
    }, 256);
  }
}

}  // namespace

GroupNormStatisticsScope::GroupNormStatisticsScope(GroupNormStatistics* source)
    : previous_(t_group_norm_statistics) {
  t_group_norm_statistics = source;
}

GroupNormStatisticsScope::~GroupNormStatisticsScope() { t_group_norm_statistics = previous_; }

Tensor GroupNorm::operator()(const Tensor& x, bool silu) const { return with_eps(eps)(x, silu); }

Tensor GroupNorm::WithEps::operator()(const Tensor& x, bool silu) const {
  if (x.rank() < 2 || x.dim(-1) != norm.channels)
    fail("internal: GroupNorm(", norm.channels, ") applied to shape ", shape_str(x.shape()));
  const int64_t N = x.dim(0);
  const int64_t per_sample = x.numel() / N / norm.channels;
  Tensor y = Tensor::empty(x.shape());
  if (GroupNormStatistics* source = t_group_norm_statistics) {
    std::vector<double> mean, rstd;
    source->statistics(x, norm.groups, eps, mean, rstd);
    if (mean.size() != static_cast<size_t>(N * norm.groups) || rstd.size() != mean.size())
      fail("internal: GroupNorm statistics for ", mean.size(), " groups, expected ", N * norm.groups);
    group_norm_with(x, norm, mean, rstd, silu, y);
    return y;
  }
  kernels::group_norm_nhwc(x.data(), N, per_sample, norm.channels, norm.groups, eps, norm.gamma.data(),
                           norm.beta.data(), y.data(), silu);
  return y;
}

LayerNorm LayerNorm::load(WeightSource& w, const std::string& prefix, int64_t channels, float eps) {
  LayerNorm l;
  l.channels = channels;
  l.eps = eps;
  l.gamma = to_vector(w.take(prefix + ".weight", {channels}));
  l.beta = to_vector(w.take(prefix + ".bias", {channels}));
  return l;
}

Tensor LayerNorm::operator()(const Tensor& x) const {
  if (x.rank() < 1 || x.dim(-1) != channels)
    fail("internal: LayerNorm(", channels, ") applied to shape ", shape_str(x.shape()));
  Tensor y = Tensor::empty(x.shape());
  kernels::layer_norm(x.data(), x.numel() / channels, channels, eps, gamma.data(), beta.data(), y.data());
  return y;
}

Tensor to_nhwc(const Tensor& x) {
  Tensor y = Tensor::empty({x.dim(0), x.dim(2), x.dim(3), x.dim(1)});
  kernels::nchw_to_nhwc(x.data(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), y.data());
  return y;
}

Tensor to_nchw(const Tensor& x) {
  Tensor y = Tensor::empty({x.dim(0), x.dim(3), x.dim(1), x.dim(2)});
  kernels::nhwc_to_nchw(x.data(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), y.data());
  return y;
}

}  // namespace octodiff
