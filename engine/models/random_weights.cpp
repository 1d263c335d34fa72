#include "models/random_weights.h"

#include <cmath>
#include <cstring>

namespace octodiff {
namespace {

// Non-weight tensors of an original ldm checkpoint, so readers meet them as in real files.
std::vector<TensorToWrite> ldm_extras(SingleFileCheckpoint::Family family, std::optional<int64_t> global_step) {
  std::vector<TensorToWrite> extra;
  auto schedule = [](const char* name, int which) {
    return TensorToWrite{name, DType::F32, {1000}, [which](uint8_t* dst, size_t) {
                           float* out = reinterpret_cast<float*>(dst);
                           double cumprod = 1.0, s0 = std::sqrt(0.00085), s1 = std::sqrt(0.012);
                           for (int i = 0; i < 1000; ++i) {
                             const double b = std::pow(s0 + (s1 - s0) * i / 999.0, 2.0);
                             const double prev = cumprod;
                             cumprod *= 1.0 - b;
                             out[i] = static_cast<float>(which == 0 ? b : which == 1 ? cumprod : prev);
                           }
                         }};
  };
  extra.push_back(schedule("betas", 0));
  extra.push_back(schedule("alphas_cumprod", 1));
  extra.push_back(schedule("alphas_cumprod_prev", 2));
  if (family != SingleFileCheckpoint::Family::SD2)
    extra.push_back({family == SingleFileCheckpoint::Family::SDXL
                         ? "conditioner.embedders.0.transformer.text_model.embeddings.position_ids"
                         : "cond_stage_model.transformer.text_model.embeddings.position_ids",
                     DType::I64,
                     {1, 77},
                     [](uint8_t* dst, size_t) {
                       for (int64_t i = 0; i < 77; ++i) std::memcpy(dst + 8 * i, &i, 8);
                     }});
  if (global_step)
    extra.push_back({"global_step", DType::I64, {}, [step = *global_step](uint8_t* dst, size_t) {
                       std::memcpy(dst, &step, 8);
                     }});
  return extra;
}

}  // namespace

// Component seeds differ so that equal names in two components never share values.
uint64_t component_seed(uint64_t seed, int component) {
  return seed * 0x9e3779b97f4a7c15ull + component;
}

std::vector<DiffusersTensor> random_tensors(const std::vector<ParameterSpec>& specs, uint64_t seed) {
  std::vector<DiffusersTensor> out;
  for (const auto& s : specs)
    out.push_back({s.name, s.shape, [s, seed](float* dst) { synthetic_parameter_values(s, seed, dst); }});
  return out;
}

RandomModelWeights random_model_weights(const UNetConfig& unet, const VaeConfig& vae, const ClipTextConfig& text,
                                        const ClipTextConfig* text_2, uint64_t seed) {
  RandomModelWeights w;
  w.unet = random_tensors(unet_parameters(unet), component_seed(seed, 0));
  w.vae = random_tensors(vae_parameters(vae), component_seed(seed, 1));
  w.text_encoder = random_tensors(clip_text_parameters(text), component_seed(seed, 2));
  if (text_2) w.text_encoder_2 = random_tensors(clip_text_projection_parameters(*text_2), component_seed(seed, 4));
  return w;
}

SingleFileContents random_single_file_contents(const RandomModelWeights& weights, SingleFileCheckpoint::Family family,
                                               uint64_t seed, std::optional<int64_t> global_step) {
  SingleFileContents contents;
  contents.family = family;
  contents.unet = weights.unet;
  contents.vae = weights.vae;
  contents.text_encoder = weights.text_encoder;
  contents.text_encoder_2 = weights.text_encoder_2;
  contents.fill_unused = [seed](const std::string& name, const Shape& shape, float* dst) {
    synthetic_values(name, shape, component_seed(seed, 3), dst);
  };
  contents.extra = ldm_extras(family, global_step);
  return contents;
}

}  // namespace octodiff
