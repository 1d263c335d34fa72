#include "distributed/device_split.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace octodiff {

std::vector<DeviceRange> split_devices(int devices, int parts) {
  if (devices < 0 || parts < 1) fail("cannot split ", devices, " devices into ", parts, " parts");
  std::vector<DeviceRange> ranges;
  int begin = 0;
  for (int p = 0; p < parts; ++p) {
    const int size = devices / parts + (p < devices % parts ? 1 : 0);
    ranges.push_back({begin, begin + size});
    begin += size;
  }
  return ranges;
}

std::vector<jax::Key> whole_run_device_keys(const ResolvedRequest& whole) {
  const GenerationRequest& req = whole.request;
  if (!req.device_keys.empty()) return req.device_keys;
  return jax::split(jax::prng_key(req.seed), whole.signature.devices, req.rng);
}

namespace {

// A (D, …) tensor's rows [begin, end) as a tensor of its own.
std::optional<Tensor> slice_devices(const std::optional<Tensor>& t, DeviceRange range) {
  if (!t) return std::nullopt;
  return t->slice0(range.begin, range.end).clone();
}

// One per device (size D): the range's; else (one for every device) unchanged.
template <typename T>
std::vector<T> per_device_slice(const std::vector<T>& v, int devices, DeviceRange range) {
  if (static_cast<int>(v.size()) != devices || devices == 1) return v;
  return std::vector<T>(v.begin() + range.begin, v.begin() + range.end);
}

template <typename T>
std::vector<T> image_slice(const std::vector<T>& v, int batch, DeviceRange range) {
  return std::vector<T>(v.begin() + int64_t{range.begin} * batch, v.begin() + int64_t{range.end} * batch);
}

}  // namespace

GenerationRequest device_subset_request(const ResolvedRequest& whole, DeviceRange range) {
  const int D = whole.signature.devices, B = whole.signature.batch;
  if (range.begin < 0 || range.end > D || range.size() < 1)
    fail("devices [", range.begin, ", ", range.end, ") are not a part of a run of ", D, " devices");
  GenerationRequest sub = whole.request;
  sub.devices = range.size();
  sub.prompts = image_slice(whole.prompts, B, range);
  sub.negative_prompts = image_slice(whole.negative_prompts, B, range);
  const std::vector<jax::Key> keys = whole_run_device_keys(whole);
  sub.device_keys.assign(keys.begin() + range.begin, keys.begin() + range.end);
  sub.latents = slice_devices(whole.request.latents, range);
  sub.step_noise = slice_devices(whole.request.step_noise, range);
  sub.posterior_noise = slice_devices(whole.request.posterior_noise, range);
  sub.masked_posterior_noise = slice_devices(whole.request.masked_posterior_noise, range);
  sub.init_images = per_device_slice(whole.request.init_images, D, range);
  sub.masks = per_device_slice(whole.request.masks, D, range);
  for (ControlNetUse& c : sub.controlnets) c.images = per_device_slice(c.images, D, range);
  return sub;
}

namespace {

// The parts' (d_i, …) tensors one after another along the first axis.
Tensor concat_devices(const std::vector<const Tensor*>& parts) {
  Shape shape = parts.at(0)->shape();
  shape[0] = 0;
  for (const Tensor* t : parts) shape[0] += t->dim(0);
  Tensor out = Tensor::empty(shape);
  float* dst = out.data();
  for (const Tensor* t : parts) {
    std::memcpy(dst, t->data(), sizeof(float) * t->numel());
    dst += t->numel();
  }
  return out;
}

template <typename T>
void append(std::vector<T>& to, const std::vector<T>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

void join_timings(const std::vector<GenerationResult>& parts, int devices, Timings& t) {
  for (const GenerationResult& p : parts) {
    const Timings& pt = p.timings;
    t.compile = std::max(t.compile, pt.compile);
    t.text_encode = std::max(t.text_encode, pt.text_encode);
    t.denoise = std::max(t.denoise, pt.denoise);
    t.encode_image = std::max(t.encode_image, pt.encode_image);
    t.decode = std::max(t.decode, pt.decode);
    t.total = std::max(t.total, pt.total);
    const double weight = static_cast<double>(p.signature.devices) / devices;
    t.mean_step += pt.mean_step * weight;
    if (t.step.size() < pt.step.size()) t.step.resize(pt.step.size(), 0.0);
    for (size_t i = 0; i < pt.step.size(); ++i) t.step[i] += pt.step[i] * weight;
  }
}

}  // namespace

GenerationResult join_device_results(const ResolvedRequest& whole, const std::vector<GenerationResult>& parts) {
  if (parts.empty()) fail("no results to join");
  int devices = 0;
  for (const GenerationResult& p : parts) devices += p.signature.devices;
  if (devices != whole.signature.devices)
    fail("the parts' results cover ", devices, " devices, the run has ", whole.signature.devices);
  GenerationResult joined;
  joined.signature = whole.signature;
  std::vector<const Tensor*> images, initial, final_latents;
  for (const GenerationResult& p : parts) {
    joined.compiled = joined.compiled || p.compiled;
    images.push_back(&p.images);
    initial.push_back(&p.initial_latents);
    final_latents.push_back(&p.final_latents);
    append(joined.device_keys, p.device_keys);
    append(joined.prompts, p.prompts);
    append(joined.negative_prompts, p.negative_prompts);
    append(joined.context_tokens, p.context_tokens);
    append(joined.nsfw_flagged, p.nsfw_flagged);  // per image, device order; empty when not checked
    for (const std::string& w : p.warnings)
      if (std::find(joined.warnings.begin(), joined.warnings.end(), w) == joined.warnings.end())
        joined.warnings.push_back(w);
    for (const auto& e : p.embeddings)
      if (std::none_of(joined.embeddings.begin(), joined.embeddings.end(), [&](auto& j) { return j.name == e.name; }))
        joined.embeddings.push_back(e);
    joined.peak_rss_bytes = std::max(joined.peak_rss_bytes, p.peak_rss_bytes);
  }
  joined.images = concat_devices(images);
  joined.initial_latents = concat_devices(initial);
  joined.final_latents = concat_devices(final_latents);
  joined.model_calls = parts[0].model_calls;
  joined.vae_tiles = parts[0].vae_tiles;  // every part decodes the same size the same way
  joined.threads_per_device = parts[0].threads_per_device;
  joined.concurrent_devices = parts[0].concurrent_devices;
  join_timings(parts, devices, joined.timings);
  return joined;
}

}  // namespace octodiff
