#include "io/lora.h"

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace octodiff {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

enum class Role { Down, Up, Alpha };

// One tensor of the file, understood.
struct ParsedKey {
  LoraTarget target;
  Role role = Role::Down;
  std::string format;
};

// The three tensors of one module.
struct Triple {
  LoraTarget target;
  const TensorRecord* down = nullptr;
  const TensorRecord* up = nullptr;
  const TensorRecord* alpha = nullptr;
};

// LyCORIS and other non-LoRA adapters, recognised by their tensor names.
void refuse_lycoris(const std::string& file, const std::string& key) {
  static const std::pair<const char*, const char*> kKinds[] = {
      {"hada_", "LoHa"}, {"lokr_", "LoKr"}, {"dora_scale", "DoRA"}, {"lora_magnitude_vector", "DoRA"},
      {"lora_mid", "LoCon with CP decomposition"}};
  for (const auto& [marker, kind] : kKinds)
    if (key.find(marker) != std::string::npos)
      fail("'", file, "' is a LyCORIS ", kind, " file (tensor '", key,
           "'); Octodiff merges plain LoRA only (lora_down/lora_up or lora_A/lora_B pairs)");
  if (ends_with(key, ".diff") || ends_with(key, ".diff_b"))
    fail("'", file, "' is a LyCORIS full-difference file (tensor '", key,
         "'); Octodiff merges plain LoRA only (lora_down/lora_up or lora_A/lora_B pairs)");
}

const char* component_title(LoraComponent c) {
  switch (c) {
    case LoraComponent::UNet: return "UNet";
    case LoraComponent::TextEncoder: return "text encoder";
    case LoraComponent::TextEncoder2: return "second text encoder (text_encoder_2)";
  }
  return "?";
}

// What a LoRA that does not fit most likely is, given the model it was loaded on.
const char* architecture_hint(const LoraKeyMap& keys) {
  return keys.sdxl() ? "is it a LoRA for another architecture, e.g. SD 1.x/2.x on this SDXL model?"
                     : "is it a LoRA for another architecture, e.g. SDXL or SD 2.x on SD 1.x?";
}

[[noreturn]] void no_parameter(const std::string& file, const std::string& key, LoraComponent c, const LoraKeyMap& keys) {
  fail("'", file, "': LoRA tensor '", key, "' changes a module this model's ", component_title(c), " does not have (",
       architecture_hint(keys), ")");
}

[[noreturn]] void refuse_sdxl_on_sd(const std::string& file, const std::string& key) {
  fail("'", file, "' is a LoRA for SDXL (tensor '", key, "' is for a second text encoder); this model is SD 1.x/2.x");
}

ParsedKey parse_kohya(const std::string& file, const std::string& key, const LoraKeyMap& keys) {
  if (starts_with(key, "lora_te2_") && !keys.sdxl()) refuse_sdxl_on_sd(file, key);
  const size_t dot = key.find('.');
  const std::string module = key.substr(0, dot);
  const std::string rest = dot == std::string::npos ? "" : key.substr(dot + 1);
  ParsedKey p;
  if (rest == "lora_down.weight") p.role = Role::Down;
  else if (rest == "lora_up.weight") p.role = Role::Up;
  else if (rest == "alpha") p.role = Role::Alpha;
  else fail("'", file, "': tensor '", key, "' is not part of a LoRA (expected <module>.lora_down.weight, .lora_up.weight or .alpha)");
  bool ldm = false;
  auto target = keys.kohya(module, &ldm);
  if (!target)
    no_parameter(file, key,
                 starts_with(key, "lora_unet_")  ? LoraComponent::UNet
                 : starts_with(key, "lora_te2_") ? LoraComponent::TextEncoder2
                                                 : LoraComponent::TextEncoder,
                 keys);
  p.target = *target;
  p.format = ldm ? "kohya (LDM names)" : "kohya";
  return p;
}

// diffusers names: the role from the key's end, the module before it.
ParsedKey parse_diffusers(const std::string& file, const std::string& key, const LoraKeyMap& keys) {
  struct Suffix {
    const char* text;
    Role role;
    const char* format;
  };
  static const Suffix kSuffixes[] = {
      {".lora_A.weight", Role::Down, "diffusers/PEFT"},
      {".lora_B.weight", Role::Up, "diffusers/PEFT"},
      {".lora.down.weight", Role::Down, "diffusers (old)"},
      {".lora.up.weight", Role::Up, "diffusers (old)"},
      {".lora_linear_layer.down.weight", Role::Down, "diffusers (old)"},
      {".lora_linear_layer.up.weight", Role::Up, "diffusers (old)"},
      {"_lora.down.weight", Role::Down, "diffusers (attention processors)"},
      {"_lora.up.weight", Role::Up, "diffusers (attention processors)"},
      {".alpha", Role::Alpha, "diffusers/PEFT"},
  };
  if (starts_with(key, "text_encoder_2.") && !keys.sdxl()) refuse_sdxl_on_sd(file, key);
  LoraComponent component = LoraComponent::UNet;
  std::string rest = key;
  if (starts_with(key, "unet.")) {
    rest = key.substr(5);
  } else if (starts_with(key, "text_encoder.")) {
    component = LoraComponent::TextEncoder;
    rest = key.substr(13);
  } else if (starts_with(key, "text_encoder_2.")) {
    component = LoraComponent::TextEncoder2;
    rest = key.substr(15);
  }
  for (const auto& s : kSuffixes) {
    if (!ends_with(rest, s.text)) continue;
    // "_lora.down.weight": the module keeps its "_lora" ("attn1.processor.to_q_lora").
    const size_t cut = rest.size() - std::string_view(s.text).size() + (s.text[0] == '_' ? 5 : 0);
    std::string module = rest.substr(0, cut);
    std::string format = s.format;
    if (module.find(".processor.") != std::string::npos) format = "diffusers (attention processors)";
    auto target = keys.diffusers(component, module);
    if (!target) no_parameter(file, key, component, keys);
    return {*target, s.role, format};
  }
  fail("'", file, "': tensor '", key, "' is not part of a LoRA of any known format (kohya lora_unet_/lora_te_, "
       "diffusers/PEFT unet./text_encoder. with lora_A/lora_B) — is this a checkpoint rather than a LoRA?");
}

ParsedKey parse_key(const std::string& file, const std::string& key, const LoraKeyMap& keys) {
  refuse_lycoris(file, key);
  if (starts_with(key, "lora_unet_") || starts_with(key, "lora_te"))
    return parse_kohya(file, key, keys);
  return parse_diffusers(file, key, keys);
}

Tensor read_float(const SafetensorsFile& f, const TensorRecord& r) {
  if (r.dtype != DType::F32 && r.dtype != DType::F16 && r.dtype != DType::BF16 && r.dtype != DType::F64)
    fail("'", f.path().string(), "': LoRA tensor '", r.name, "' is ", dtype_name(r.dtype), "; expected floating point");
  Tensor t = f.to_f32(r);
  for (float v : t)
    if (!std::isfinite(v)) fail("'", f.path().string(), "': LoRA tensor '", r.name, "' holds NaN or infinite values");
  return t;
}

// Checks the pair's shapes against its parameter and returns (down, up) as matrices.
void check_shapes(const std::string& file, const Triple& t, const Shape& down, const Shape& up, const char* hint) {
  const Shape& target = t.target.shape;
  const int64_t out = target[0], fan_in = shape_numel(target) / out;
  const int64_t rank = down.empty() ? 0 : down[0];
  const bool down_ok = (down.size() == 2 || down.size() == 4) && shape_numel(down) / std::max<int64_t>(rank, 1) == fan_in &&
                       (down.size() != 4 || target.size() != 4 || (down[2] == target[2] && down[3] == target[3]));
  const bool up_ok = (up.size() == 2 || (up.size() == 4 && up[2] == 1 && up[3] == 1)) && up[0] == out;
  if (!down_ok || !up_ok)
    fail("'", file, "': LoRA tensor '", (down_ok ? t.up : t.down)->name, "' has shape ", shape_str(down_ok ? up : down),
         ", which does not fit ", lora_component_name(t.target.component), " parameter '", t.target.parameter, "' of shape ",
         shape_str(target), " (expected down (rank, ", fan_in, ") and up (", out,
         ", rank); ", hint, ")");
  if (up[1] != rank)
    fail("'", file, "': LoRA tensors '", t.down->name, "' ", shape_str(down), " and '", t.up->name, "' ", shape_str(up),
         " have different ranks");
  if (rank < 1 || rank > std::min(out, fan_in))
    fail("'", file, "': LoRA tensor '", t.down->name, "' has rank ", rank, ", larger than the layer '", t.target.parameter,
         "' ", shape_str(target), " allows (at most ", std::min(out, fan_in), ")");
}

LoraPair read_pair(const SafetensorsFile& f, const Triple& t, const char* hint) {
  const std::string file = f.path().string();
  if (!t.down || !t.up)
    fail("'", file, "': LoRA tensor '", (t.down ? t.down : t.up ? t.up : t.alpha)->name, "' has no matching ",
         t.down ? "up" : "down", " tensor");
  check_shapes(file, t, t.down->shape, t.up->shape, hint);
  LoraPair p;
  p.target = t.target;
  p.origin = t.down->name;
  const int64_t rank = t.down->shape[0];
  p.down = read_float(f, *t.down).reshaped({rank, t.down->numel() / rank});
  p.up = read_float(f, *t.up).reshaped({t.up->shape[0], rank});
  if (t.alpha) {
    if (t.alpha->numel() != 1)
      fail("'", file, "': LoRA alpha '", t.alpha->name, "' has shape ", shape_str(t.alpha->shape), "; expected one value");
    const double alpha = f.to_f64(*t.alpha).at(0);
    if (!std::isfinite(alpha) || alpha <= 0)
      fail("'", file, "': LoRA alpha '", t.alpha->name, "' is ", alpha, "; expected a positive number");
    p.scale = static_cast<float>(alpha / static_cast<double>(rank));
  }
  return p;
}

}  // namespace

LoraFile read_lora(const std::filesystem::path& path, const LoraKeyMap& keys) {
  auto f = SafetensorsFile::open(path);
  const std::string file = path.string();
  std::map<std::pair<int, std::string>, Triple> triples;
  std::set<std::string> formats;
  for (const auto& rec : f->tensors()) {
    const ParsedKey k = parse_key(file, rec.name, keys);
    formats.insert(k.format);
    Triple& t = triples[{static_cast<int>(k.target.component), k.target.parameter}];
    t.target = k.target;
    const TensorRecord** slot = k.role == Role::Down ? &t.down : k.role == Role::Up ? &t.up : &t.alpha;
    if (*slot)
      fail("'", file, "': tensors '", (*slot)->name, "' and '", rec.name, "' both change ", t.target.parameter);
    *slot = &rec;
  }
  if (triples.empty()) fail("'", file, "' holds no tensors; it is not a LoRA");
  LoraFile out;
  out.path = path;
  for (const auto& fmt : formats) out.format += (out.format.empty() ? "" : " + ") + fmt;
  for (const auto& [key, t] : triples) out.pairs.push_back(read_pair(*f, t, architecture_hint(keys)));
  return out;
}

}  // namespace octodiff
