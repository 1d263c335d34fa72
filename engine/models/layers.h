// The building blocks every network is made of: Linear, Conv2d, GroupNorm, LayerNorm.
//
// Each holds its weights already packed for the kernels (packing happens once, at load) and
// applies itself to NHWC activations (N × H × W × C) or token matrices (N × L × C); the
// channel axis is always last, so a 1×1 convolution and a Linear are the same GEMM.
//
// `precision` is fixed at load: kernels::Precision::BF16 packs the weight as bfloat16 (not kept in
// float32 too) and computes the layer's products in bf16 with float32 sums; biases, inputs and
// outputs stay float32.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/weight_source.h"
#include "kernels/conv2d.h"
#include "kernels/gemm.h"

namespace octodiff {

struct Linear {
  int64_t in = 0, out = 0;
  kernels::PackedMatrix weight;  // from torch's (out, in)
  std::vector<float> bias;       // empty when the layer has none

  // Loads `<prefix>.weight` (out, in) — or (out, in, 1, 1) for a 1×1 conv used as a projection —
  // and `<prefix>.bias` when `has_bias`.
  static Linear load(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, bool has_bias,
                     kernels::Precision precision, bool from_conv1x1 = false);
  // Several projections of the same input fused into one GEMM (e.g. q, k, v): output columns are
  // the layers' outputs side by side, in order.
  static Linear load_fused(WeightSource& w, const std::vector<std::string>& prefixes, int64_t in,
                           int64_t out_each, bool has_bias, kernels::Precision precision);

  // x: [..., in] -> [..., out]; `residual` (same shape as the output) is added when given.
  Tensor operator()(const Tensor& x, const Tensor* residual = nullptr) const;
  // The same on raw rows: x is rows × in, y and residual (optional) rows × out.
  void forward(const float* x, int64_t rows, float* y, const float* residual = nullptr) const;
  // A guided pair of row blocks (n rows each: unconditional xu, conditioned xc): yu as forward();
  // yc, for a bf16 weight, as ScopedGuidedPairs describes (W·bf16(xu) + W·bf16(xc − xu) + bias +
  // residual_c), for a float32 weight as forward().
  void forward_pair(const float* xu, const float* xc, int64_t n, float* yu, float* yc,
                    const float* residual_u = nullptr, const float* residual_c = nullptr) const;
};

struct Conv2d {
  kernels::Conv2dWeights weight;
  kernels::Conv2dGeometry geometry;

  // `<prefix>.weight` (out, in, k, k) and, when `has_bias`, `<prefix>.bias`.
  static Conv2d load(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, int k,
                     kernels::Conv2dGeometry geometry, kernels::Precision precision, bool has_bias = true);
  static Conv2d load_same(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, int k,
                          kernels::Precision precision, bool has_bias = true) {
    return load(w, prefix, in, out, k, kernels::Conv2dGeometry::same(k), precision, has_bias);
  }
  // A 3×3 same convolution that is only ever applied to 2× nearest-upsampled inputs (upsampled()):
  // packed for kernels::conv2d_upsample2x_nhwc's fused kernel where the loader's scopes allow it.
  static Conv2d load_after_upsample(WeightSource& w, const std::string& prefix, int64_t in, int64_t out,
                                    kernels::Precision precision, bool has_bias = true);
  // x: N × H × W × Cin -> N × Ho × Wo × Cout, plus `residual` when given; then ReLU when `relu`
  // (kernels::conv2d_nhwc: fused into a Winograd convolution's output transform).
  Tensor operator()(const Tensor& x, const Tensor* residual = nullptr, bool relu = false) const;
  // The same of upsample_nearest2x(x): N × H × W × Cin -> N × 2H × 2W × Cout, without the upsampled
  // copy for a weight loaded by load_after_upsample.
  Tensor upsampled(const Tensor& x, const Tensor* residual = nullptr, bool relu = false) const;

 private:
  static Conv2d load_as(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, int k,
                        kernels::Conv2dGeometry geometry, kernels::Precision precision, bool has_bias,
                        kernels::ConvAlgorithm algorithm);
  Tensor apply(const Tensor& x, const Tensor* residual, bool relu, bool upsample) const;
};

// Classifier-free guidance pairs (bf16 layers only). A guided UNet call runs a batch whose first
// half is the unconditional input and whose second half the text-conditioned one, and its noise
// is u + g·(c − u): rounding errors of the two halves enter with weights 1 − g and g (−6.5 and 7.5
// at guidance 7.5), so independent bf16 roundings of u's and c's activations are amplified ~10×.
// While one of these lives on a thread with batch > 0, bf16 Linear and Conv2d layers on it whose
// input has exactly `batch` samples take them as such pairs (sample i with sample batch/2 + i) and
// compute the second half as W·bf16(x_u) + W·bf16(x_c − x_u) (+ bias, residual): x_u rounded as
// in the first half, plus the rounded difference, whose error is relative to the (small)
// difference, so c − u keeps its precision for the same number of products. The first half is
// computed exactly as without pairs. Layers on other batch sizes (e.g. the UNet's text-free first
// layers, run once per distinct sample) and float32 layers are unaffected.
class ScopedGuidedPairs {
 public:
  explicit ScopedGuidedPairs(int64_t batch);  // 0: off
  ~ScopedGuidedPairs();
  ScopedGuidedPairs(const ScopedGuidedPairs&) = delete;
  ScopedGuidedPairs& operator=(const ScopedGuidedPairs&) = delete;

 private:
  int64_t previous_;
};
// Whether a bf16 layer on this thread takes an input of `samples` samples as guided pairs.
bool takes_guided_pairs(int64_t samples, kernels::Precision precision);

struct GroupNorm {
  int64_t channels = 0, groups = 32;
  float eps = 1e-5f;
  std::vector<float> gamma, beta;

  static GroupNorm load(WeightSource& w, const std::string& prefix, int64_t channels, int64_t groups,
                        float eps);
  // x: N × ... × C (NHWC or tokens); silu fuses the activation that usually follows.
  Tensor operator()(const Tensor& x, bool silu) const;
  // A view of this norm with another epsilon (parameters shared, nothing copied).
  struct WithEps {
    const GroupNorm& norm;
    float eps;
    Tensor operator()(const Tensor& x, bool silu) const;
  };
  WithEps with_eps(float e) const { return {*this, e}; }
};

// Statistics a GroupNorm normalises with instead of its input's own: tiled VAE decoding
// (pipeline/tiled_decode.h) normalises each tile with the whole image's. While a source is
// installed on a thread (GroupNormStatisticsScope), every GroupNorm on that thread asks it.
class GroupNormStatistics {
 public:
  virtual ~GroupNormStatistics() = default;
  // x: the input (N × H × W × C) of the thread's next GroupNorm. Fills mean and
  // rstd = 1/sqrt(var + eps), N × groups each (sample-major), to normalise x with.
  virtual void statistics(const Tensor& x, int64_t groups, float eps, std::vector<double>& mean,
                          std::vector<double>& rstd) = 0;
};

// Installs `source` on the calling thread until the scope ends (the previous one after it).
class GroupNormStatisticsScope {
 public:
  explicit GroupNormStatisticsScope(GroupNormStatistics* source);
  ~GroupNormStatisticsScope();
  GroupNormStatisticsScope(const GroupNormStatisticsScope&) = delete;
  GroupNormStatisticsScope& operator=(const GroupNormStatisticsScope&) = delete;

 private:
  GroupNormStatistics* previous_ = nullptr;
};

struct LayerNorm {
  int64_t channels = 0;
  float eps = 1e-5f;
  std::vector<float> gamma, beta;

  static LayerNorm load(WeightSource& w, const std::string& prefix, int64_t channels, float eps);
  Tensor operator()(const Tensor& x) const;
};

// A large weight used as is (e.g. an embedding table): kept in the component's weight cache
// like the packed weights when one is active (io/weight_cache.h), else on the heap.
Tensor stored_tensor(WeightSource& w, const std::string& name, const Shape& shape);

// Layout changes of a rank-4 tensor: N × C × H × W (diffusers' tensors) ↔ N × H × W × C (what
// the models run on).
Tensor to_nhwc(const Tensor& nchw);
Tensor to_nchw(const Tensor& nhwc);

// Packed weights of one loaded component, by the tensors they were made from, so that loading the
// component again with a few of its tensors changed (LoRAs merged, pipeline/lora.h) packs only
// the layers those tensors belong to and shares every other layer's packed weights with the
// first load: nothing of them is read or packed again (biases and norm parameters, small, are
// read again). The matrices hold their storage (heap or weight-cache mapping) by shared_ptr.
struct PackedLayers {
  std::map<std::string, kernels::PackedMatrix> matrices;  // key: the tensors' names joined by '+'
  std::map<std::string, Tensor> stored;                   // stored_tensor() weights by name
};

// What a load did with its packed weights (counted while a PackedLayersScope is alive).
struct PackedLayerStats {
  int packed = 0;      // packed from the weights (read, converted, packed)
  int reused = 0;      // shared with an earlier load (PackedLayers)
  int from_cache = 0;  // mapped from the component's weight cache (io/weight_cache.h)
};

// While alive, on this thread: every packed weight and stored tensor a layer loads is recorded
// into `record` (when not null); a layer none of whose tensors is patched in its WeightSource
// (WeightSource::patched) takes its packed weights from `reuse` when they are there (when not
// null), else packs them; `stats` (when not null) counts which. Nests like the other scopes.
class PackedLayersScope {
 public:
  PackedLayersScope(PackedLayers* record, const PackedLayers* reuse, PackedLayerStats* stats);
  ~PackedLayersScope();
  PackedLayersScope(const PackedLayersScope&) = delete;
  PackedLayersScope& operator=(const PackedLayersScope&) = delete;

 private:
  PackedLayers* record_;
  const PackedLayers* reuse_;
  PackedLayerStats* stats_;
};

// Copies a loaded tensor into a std::vector (biases, norm parameters).
std::vector<float> to_vector(const Tensor& t);

// Packing a weight converts it to a float32 tensor (a float32 one is read where it lies in the
// file, WeightSource::take_to_read) and may rearrange it before the packed copy is made; those
// temporaries come from one arena per loading thread, so loading a model reuses the same few
// hundred MB instead of touching ~6 GB of fresh pages (on the development VM, first-touch page
// faults were 70 % of SD 1.5's load time). Call when a component is loaded.
void release_packing_scratch();

}  // namespace octodiff
