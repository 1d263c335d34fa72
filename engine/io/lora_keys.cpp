#include "io/lora_keys.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace octodiff {

namespace {

constexpr std::string_view kWeight = ".weight";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_matrix_weight(const NamedShape& p) {
  return ends_with(p.name, kWeight) && (p.shape.size() == 2 || p.shape.size() == 4);
}

std::string module_of(const std::string& parameter) { return parameter.substr(0, parameter.size() - kWeight.size()); }

std::string underscored(std::string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

// Replaces the last path element `from` (".../from" or "from") by `to`.
bool replace_leaf(std::string& module, const std::string& from, const std::string& to) {
  if (module == from) {
    module = to;
    return true;
  }
  if (!ends_with(module, "." + from)) return false;
  module = module.substr(0, module.size() - from.size()) + to;
  return true;
}

// diffusers' old LoRA names (utils/state_dict_utils.py: KEYS_TO_ALWAYS_REPLACE drops ".processor.",
// UNET_TO_DIFFUSERS maps the UNet's `to_q_lora` → `to_q`, `to_out_lora` → `to_out.0`, and
// DIFFUSERS_OLD_TO_PEFT the text encoder's `to_q_lora` → `q_proj`, `to_out_lora` → `out_proj`).
std::string resolve_old_names(LoraComponent component, std::string module) {
  if (auto p = module.find(".processor."); p != std::string::npos) module.erase(p, std::string(".processor").size());
  static const std::pair<const char*, const char*> kUNet[] = {
      {"to_q_lora", "to_q"}, {"to_k_lora", "to_k"}, {"to_v_lora", "to_v"}, {"to_out_lora", "to_out.0"}};
  static const std::pair<const char*, const char*> kText[] = {
      {"to_q_lora", "q_proj"}, {"to_k_lora", "k_proj"}, {"to_v_lora", "v_proj"}, {"to_out_lora", "out_proj"}};
  for (const auto& [from, to] : component == LoraComponent::UNet ? kUNet : kText)
    if (replace_leaf(module, from, to)) break;
  return module;
}

}  // namespace

const char* lora_component_name(LoraComponent c) {
  switch (c) {
    case LoraComponent::UNet: return "unet";
    case LoraComponent::TextEncoder: return "text_encoder";
    case LoraComponent::TextEncoder2: return "text_encoder_2";
  }
  return "?";
}

LoraKeyMap::LoraKeyMap(const LoraTargets& targets) {
  std::set<std::string> ambiguous;
  auto add = [&](const std::string& key, LoraTarget target, bool ldm) {
    if (ambiguous.count(key)) return;
    auto [it, inserted] = kohya_.emplace(key, KohyaEntry{target, ldm});
    if (!inserted && it->second.target.parameter != target.parameter) {
      kohya_.erase(it);  // two parameters with one kohya name: refuse both rather than guess
      ambiguous.insert(key);
    }
  };
  for (const auto& p : targets.unet) {
    unet_[p.name] = p.shape;
    if (is_matrix_weight(p))
      add("lora_unet_" + underscored(module_of(p.name)), {LoraComponent::UNet, p.name, p.shape}, false);
  }
  for (const auto& p : targets.text_encoder) {
    text_encoder_[p.name] = p.shape;
    if (!is_matrix_weight(p)) continue;
    for (const char* prefix : {"lora_te_", "lora_te1_"})
      add(prefix + underscored(module_of(p.name)), {LoraComponent::TextEncoder, p.name, p.shape}, false);
  }
  for (const auto& p : targets.text_encoder_2) {  // SDXL (kohya's sdxl_train_network names)
    text_encoder_2_[p.name] = p.shape;
    if (is_matrix_weight(p))
      add("lora_te2_" + underscored(module_of(p.name)), {LoraComponent::TextEncoder2, p.name, p.shape}, false);
  }
  // LDM names through the single-file loader's rule table. A UNet it cannot lay out (not an
  // SD-style block structure) simply has no LDM names.
  if (targets.unet.empty()) return;
  std::vector<LdmTensorPlan> plans;
  try {
    plans = plan_ldm_tensors(LdmComponent::UNet, targets.unet);
  } catch (const Error&) {
    return;
  }
  const std::string ldm_prefix = "model.diffusion_model.";
  for (const auto& plan : plans) {
    if (plan.sources.size() != 1 || plan.name.rfind(ldm_prefix, 0) != 0 || !ends_with(plan.name, kWeight)) continue;
    auto it = unet_.find(plan.sources[0]);
    if (it == unet_.end() || !is_matrix_weight({it->first, it->second})) continue;
    const std::string ldm = module_of(plan.name.substr(ldm_prefix.size()));
    add("lora_unet_" + underscored(ldm), {LoraComponent::UNet, it->first, it->second}, true);
  }
}

std::optional<LoraTarget> LoraKeyMap::kohya(const std::string& module, bool* ldm_named) const {
  auto it = kohya_.find(module);
  if (it == kohya_.end()) return std::nullopt;
  if (ldm_named) *ldm_named = it->second.ldm;
  return it->second.target;
}

std::optional<LoraTarget> LoraKeyMap::diffusers(LoraComponent component, const std::string& module) const {
  const auto& params = component == LoraComponent::UNet          ? unet_
                       : component == LoraComponent::TextEncoder ? text_encoder_
                                                                 : text_encoder_2_;
  const std::string name = resolve_old_names(component, module) + std::string(kWeight);
  auto it = params.find(name);
  if (it == params.end() || !is_matrix_weight({it->first, it->second})) return std::nullopt;
  return LoraTarget{component, it->first, it->second};
}

}  // namespace octodiff
