#include "pipeline/lora.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>

#include "core/error.h"
#include "kernels/gemm.h"
#include "models/parameter_catalog.h"

namespace octodiff {
namespace fs = std::filesystem;

namespace {

std::vector<NamedShape> named_shapes(const std::vector<ParameterSpec>& params) {
  std::vector<NamedShape> out;
  for (const auto& p : params) out.push_back({p.name, p.shape});
  return out;
}

// A whole string as a finite number.
bool parse_number(const std::string& s, float* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = static_cast<float>(v);
  return true;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

std::string available_loras(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  if (names.empty()) return "it has no .safetensors files";
  std::string list;
  for (size_t i = 0; i < names.size() && i < 20; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 20) list += cat(" and ", names.size() - 20, " more");
  return "it has: " + list;
}

fs::path resolve_lora_name(const std::string& name, const fs::path& dir) {
  if (dir.empty())
    fail("the prompt uses <lora:", name, "> but no LoRA folder was given (--lora-dir)");
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    fail("<lora:", name, ">: a LoRA is named by its file name in the LoRA folder, without '/' or '.safetensors'");
  const fs::path p = dir / (name + ".safetensors");
  if (!fs::is_regular_file(p))
    fail("<lora:", name, ">: no '", p.filename().string(), "' in the LoRA folder '", dir.string(), "' (",
         available_loras(dir), ")");
  return p;
}

// Removes one tag spanning [begin, end) from `text`, with one of the spaces around it.
void remove_tag(std::string& text, size_t begin, size_t end) {
  if (begin > 0 && text[begin - 1] == ' ' && end < text.size() && text[end] == ' ') ++end;
  text.erase(begin, end - begin);
}

}  // namespace

LoraTargets lora_targets(const UNetConfig& unet, const ClipTextConfig& text_encoder,
                         const ClipTextConfig* text_encoder_2) {
  LoraTargets t;
  t.unet = named_shapes(unet_parameters(unet));
  t.text_encoder = named_shapes(clip_text_parameters(text_encoder));
  if (text_encoder_2) t.text_encoder_2 = named_shapes(clip_text_projection_parameters(*text_encoder_2));
  return t;
}

Tensor merge_lora_terms(const Tensor& weight, const std::vector<LoraTerm>& terms) {
  const int64_t out = weight.dim(0), fan_in = weight.numel() / out;
  Tensor merged = Tensor::empty(weight.shape());
  std::memcpy(merged.data(), weight.data(), sizeof(float) * static_cast<size_t>(weight.numel()));
  for (const LoraTerm& t : terms) {
    const int64_t rank = t.down.dim(0);
    if (t.up.dim(0) != out || t.up.dim(1) != rank || t.down.dim(1) != fan_in)
      fail("internal: LoRA update ", shape_str(t.up.shape()), " @ ", shape_str(t.down.shape()), " for weight ",
           shape_str(weight.shape()));
    // delta = (factor · up) · down, as A · Bᵀ with B = downᵀ (fan_in × rank).
    Tensor up_scaled = Tensor::empty({out, rank});
    for (int64_t i = 0; i < out * rank; ++i) up_scaled.data()[i] = t.factor * t.up.data()[i];
    Tensor down_t = Tensor::empty({fan_in, rank});
    for (int64_t r = 0; r < rank; ++r)
      for (int64_t j = 0; j < fan_in; ++j) down_t.data()[j * rank + r] = t.down.data()[r * fan_in + j];
    Tensor delta = Tensor::empty({out, fan_in});
    kernels::gemm_abt(up_scaled.data(), rank, down_t.data(), rank, delta.data(), fan_in, out, fan_in, rank);
    float* w = merged.data();
    const float* d = delta.data();
    for (int64_t i = 0; i < out * fan_in; ++i) w[i] += d[i];
  }
  return merged;
}

std::vector<AppliedLora> patch_loras(const std::vector<LoraSpec>& loras, const LoraTargets& targets, WeightSource& unet,
                                     WeightSource& text_encoder, WeightSource* text_encoder_2) {
  if (!targets.text_encoder_2.empty() && !text_encoder_2) fail("internal: SDXL LoRA targets without text_encoder_2");
  if (loras.empty()) return {};
  const LoraKeyMap keys(targets);
  std::map<std::pair<int, std::string>, std::vector<LoraTerm>> terms;  // (component, parameter) → updates
  std::vector<AppliedLora> applied;
  for (const LoraSpec& spec : loras) {
    if (!std::isfinite(spec.strength)) fail("LoRA '", spec.path.string(), "': the strength must be a finite number");
    const LoraFile file = read_lora(spec.path, keys);
    AppliedLora a{spec, spec.path.stem().string(), file.format};
    for (const LoraPair& p : file.pairs) {
      ++(p.target.component == LoraComponent::UNet          ? a.unet_layers
         : p.target.component == LoraComponent::TextEncoder ? a.text_encoder_layers
                                                            : a.text_encoder_2_layers);
      if (spec.strength == 0.0f) continue;  // validated, changes nothing: the base's layers stay
      terms[{static_cast<int>(p.target.component), p.target.parameter}].push_back(
          {p.down, p.up, spec.strength * p.scale});
    }
    applied.push_back(std::move(a));
  }
  for (auto& [key, list] : terms) {
    const auto component = static_cast<LoraComponent>(key.first);
    WeightSource& source = component == LoraComponent::UNet          ? unet
                           : component == LoraComponent::TextEncoder ? text_encoder
                                                                     : *text_encoder_2;
    source.patch(key.second, [list = std::move(list)](const Tensor& w) { return merge_lora_terms(w, list); });
  }
  return applied;
}

LoraSpec parse_lora_argument(const std::string& text) {
  LoraSpec spec;
  spec.path = text;
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return spec;
  const std::string suffix = text.substr(colon + 1);
  float strength = 0;
  if (parse_number(suffix, &strength)) {
    spec.path = text.substr(0, colon);
    spec.strength = strength;
  } else if (fs::path(text.substr(0, colon)).extension() == ".safetensors") {
    fail("--lora ", text, ": '", suffix, "' is not a strength (a number, e.g. FILE:0.8)");
  }
  return spec;
}

PromptLoras extract_prompt_loras(const std::vector<std::string>& prompts, const fs::path& lora_dir) {
  static const std::regex kTag("<lora:([^<>]*)>");
  PromptLoras out;
  std::map<std::string, float> strengths;  // by name
  for (std::string prompt : prompts) {
    bool removed = false;
    std::smatch m;
    while (std::regex_search(prompt, m, kTag)) {
      const std::string body = m[1].str();
      std::vector<std::string> fields;
      for (size_t p = 0;;) {
        const size_t q = body.find(':', p);
        fields.push_back(trim(body.substr(p, q == std::string::npos ? std::string::npos : q - p)));
        if (q == std::string::npos) break;
        p = q + 1;
      }
      if (fields.size() > 2)
        fail("<lora:", body, ">: only <lora:NAME> and <lora:NAME:STRENGTH> are supported");
      float strength = 1.0f;
      if (fields.size() == 2 && !parse_number(fields[1], &strength))
        fail("<lora:", body, ">: the strength '", fields[1], "' is not a number");
      const std::string& name = fields[0];
      const fs::path path = resolve_lora_name(name, lora_dir);
      auto [it, inserted] = strengths.emplace(name, strength);
      if (inserted) {
        out.loras.push_back({path, strength});
      } else if (it->second != strength) {
        fail("LoRA '", name, "' appears with strengths ", it->second, " and ", strength,
             "; the LoRAs apply to every image, so give it one strength");
      }
      remove_tag(prompt, static_cast<size_t>(m.position(0)), static_cast<size_t>(m.position(0) + m.length(0)));
      removed = true;
    }
    out.prompts.push_back(removed ? trim(prompt) : prompt);
  }
  return out;
}

}  // namespace octodiff
