#include "io/single_file.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"

namespace octodiff {
namespace {

using Family = SingleFileCheckpoint::Family;

constexpr std::string_view kUNetPrefix = "model.diffusion_model.";
constexpr std::string_view kVaePrefix = "first_stage_model.";
constexpr std::string_view kClipPrefix = "cond_stage_model.transformer.";
constexpr std::string_view kOpenClipPrefix = "cond_stage_model.model.";
constexpr std::string_view kEmaPrefix = "model_ema.";
constexpr std::string_view kSdxlClipPrefix = "conditioner.embedders.0.transformer.";
constexpr std::string_view kSdxlOpenClipPrefix = "conditioner.embedders.1.model.";

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
std::string str(int i) {
  return std::to_string(i);
}
std::string join(const std::string& prefix, const std::string& rest) {
  return rest.empty() ? prefix : prefix + "." + rest;
}

// Matches the leading components of the dotted `key` against `pattern`, where "#" matches a
// non-negative integer. Returns the integers "#" matched, or nullopt.
std::optional<std::vector<int>> match(std::string_view key, std::initializer_list<std::string_view> pattern) {
  std::vector<int> ints;
  size_t pos = 0;
  for (std::string_view p : pattern) {
    if (pos > key.size()) return std::nullopt;
    size_t dot = key.find('.', pos);
    if (dot == std::string_view::npos) dot = key.size();
    std::string_view c = key.substr(pos, dot - pos);
    if (p == "#") {
      if (c.empty() || c.size() > 6 ||
          !std::all_of(c.begin(), c.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        return std::nullopt;
      ints.push_back(std::stoi(std::string(c)));
    } else if (c != p) {
      return std::nullopt;
    }
    pos = dot + 1;
  }
  return ints;
}

// 1 + the largest integer captured at position `capture` by `pattern` over `names` (0 if none).
int count_of(const std::vector<std::string>& names, std::initializer_list<std::string_view> pattern,
             size_t capture = 0) {
  int n = 0;
  for (const auto& name : names)
    if (auto m = match(name, pattern)) n = std::max(n, (*m)[capture] + 1);
  return n;
}

// ---- One rule table per component, read in both directions ---------------------------------

// How names below a matched module differ between the layouts.
enum class Inner {
  Same,        // identical
  UNetResnet,  // in_layers.0 ↔ norm1, …
  VaeResnet,   // nin_shortcut ↔ conv_shortcut
  Squeeze,     // ldm 1×1 conv weight (C, C, 1, 1) ↔ diffusers linear (C, C)
  FusedQkv,    // OpenCLIP attn.in_proj_{weight,bias} ↔ self_attn.{q,k,v}_proj.{weight,bias}
};

using Renames = std::vector<std::pair<std::string, std::string>>;  // (ldm, diffusers)
const Renames kUNetResnetRenames = {{"in_layers.0", "norm1"},          {"in_layers.2", "conv1"},
                                    {"emb_layers.1", "time_emb_proj"}, {"out_layers.0", "norm2"},
                                    {"out_layers.3", "conv2"},         {"skip_connection", "conv_shortcut"}};
const Renames kVaeResnetRenames = {{"nin_shortcut", "conv_shortcut"}};

std::string rename(const std::string& rest, const Renames& renames, bool to_diffusers) {
  for (const auto& [ldm, diffusers] : renames) {
    const std::string& from = to_diffusers ? ldm : diffusers;
    const std::string& to = to_diffusers ? diffusers : ldm;
    if (rest == from) return to;
    if (starts_with(rest, from + ".")) return to + rest.substr(from.size());
  }
  return rest;
}

// A name on the other side. Reading a fused projection gives `parts` names, row block `part` each.
struct Mapped {
  std::string name;
  int part = 0, parts = 1;
  Inner inner = Inner::Same;
};

class RuleTable {
 public:
  enum Direction { kBoth, kToDiffusersOnly, kToLdmOnly };

  void add(const std::string& ldm, const std::string& diffusers, Inner inner = Inner::Same,
           Direction direction = kBoth) {
    rules_.push_back({ldm, diffusers, inner});
    if (direction != kToLdmOnly) by_ldm_[ldm] = rules_.size() - 1;
    if (direction != kToDiffusersOnly) by_diffusers_[diffusers] = rules_.size() - 1;
  }

  // ldm key (prefix stripped) → diffusers name(s); empty when no rule covers the key.
  std::vector<Mapped> to_diffusers(const std::string& key) const {
    std::string rest;
    const Rule* r = find(by_ldm_, key, &rest);
    if (!r) return {};
    if (r->inner == Inner::FusedQkv && (rest == "in_proj_weight" || rest == "in_proj_bias")) {
      const std::string leaf = rest == "in_proj_weight" ? "weight" : "bias";
      std::vector<Mapped> out;
      for (int p = 0; p < 3; ++p)
        out.push_back({r->diffusers + "." + "qkv"[p] + "_proj." + leaf, p, 3, r->inner});
      return out;
    }
    if (r->inner == Inner::UNetResnet) rest = rename(rest, kUNetResnetRenames, true);
    if (r->inner == Inner::VaeResnet) rest = rename(rest, kVaeResnetRenames, true);
    return {{join(r->diffusers, rest), 0, 1, r->inner}};
  }

  // diffusers name → ldm key (prefix stripped), with the row block it fills when fused.
  std::optional<Mapped> to_ldm(const std::string& name) const {
    std::string rest;
    const Rule* r = find(by_diffusers_, name, &rest);
    if (!r) return std::nullopt;
    if (r->inner == Inner::FusedQkv) {
      for (int p = 0; p < 3; ++p)
        for (const char* leaf : {"weight", "bias"})
          if (rest == std::string(1, "qkv"[p]) + "_proj." + leaf)
            return Mapped{join(r->ldm, std::string("in_proj_") + leaf), p, 3, r->inner};
    }
    if (r->inner == Inner::UNetResnet) rest = rename(rest, kUNetResnetRenames, false);
    if (r->inner == Inner::VaeResnet) rest = rename(rest, kVaeResnetRenames, false);
    return Mapped{join(r->ldm, rest), 0, 1, r->inner};
  }

 private:
  struct Rule {
    std::string ldm, diffusers;
    Inner inner;
  };

  // The rule whose key is `name` itself or its longest dotted prefix; `rest` gets what follows.
  const Rule* find(const std::map<std::string, size_t>& index, const std::string& name,
                   std::string* rest) const {
    std::string head = name;
    while (true) {
      auto it = index.find(head);
      if (it != index.end()) {
        *rest = head.size() < name.size() ? name.substr(head.size() + 1) : std::string();
        return &rules_[it->second];
      }
      size_t dot = head.rfind('.');
      if (dot == std::string::npos) return nullptr;
      head.resize(dot);
    }
  }

  std::vector<Rule> rules_;
  std::map<std::string, size_t> by_ldm_, by_diffusers_;
};

// UNet: `levels` down (and up) levels of `layers` resnets each (up levels have layers + 1).
struct UNetLayout {
  int levels = 0, layers = 0;
  std::vector<bool> up_attention;  // per up level (diffusers order)
};

RuleTable unet_rules(const UNetLayout& u) {
  RuleTable t;
  t.add("time_embed.0", "time_embedding.linear_1");
  t.add("time_embed.2", "time_embedding.linear_2");
  t.add("label_emb.0.0", "add_embedding.linear_1");  // SDXL's text_time embedding
  t.add("label_emb.0.2", "add_embedding.linear_2");
  t.add("input_blocks.0.0", "conv_in");
  const int span = u.layers + 1;  // ldm blocks per level: the resnets, then the resampler
  for (int b = 0; b < u.levels; ++b) {
    const std::string down = "down_blocks." + str(b), up = "up_blocks." + str(b);
    for (int l = 0; l < u.layers; ++l) {
      const std::string in = "input_blocks." + str(1 + b * span + l);
      t.add(in + ".0", down + ".resnets." + str(l), Inner::UNetResnet);
      t.add(in + ".1", down + ".attentions." + str(l));
    }
    if (b + 1 < u.levels)
      t.add("input_blocks." + str(1 + b * span + u.layers) + ".0.op", down + ".downsamplers.0.conv");
    for (int l = 0; l < span; ++l) {
      const std::string out = "output_blocks." + str(b * span + l);
      t.add(out + ".0", up + ".resnets." + str(l), Inner::UNetResnet);
      if (u.up_attention[b]) t.add(out + ".1", up + ".attentions." + str(l));
    }
    // The upsampler follows the level's last resnet (and its attention, when there is one).
    if (b + 1 < u.levels)
      t.add("output_blocks." + str(b * span + u.layers) + (u.up_attention[b] ? ".2.conv" : ".1.conv"),
            up + ".upsamplers.0.conv");
  }
  t.add("middle_block.0", "mid_block.resnets.0", Inner::UNetResnet);
  t.add("middle_block.1", "mid_block.attentions.0");
  t.add("middle_block.2", "mid_block.resnets.1", Inner::UNetResnet);
  t.add("out.0", "conv_norm_out");
  t.add("out.2", "conv_out");
  return t;
}

// From ldm keys (prefix stripped): the downsamplers `input_blocks.n.0.op` sit at n = k·(L+1).
UNetLayout unet_layout_from_ldm(const std::vector<std::string>& keys, const std::string& what) {
  std::set<int> inputs, ops, outputs, output_attention;
  for (const auto& k : keys) {
    if (auto m = match(k, {"input_blocks", "#"})) inputs.insert((*m)[0]);
    if (auto m = match(k, {"input_blocks", "#", "0", "op"})) ops.insert((*m)[0]);
    if (auto m = match(k, {"output_blocks", "#"})) outputs.insert((*m)[0]);
    if (auto m = match(k, {"output_blocks", "#", "1"}); m && !match(k, {"output_blocks", "#", "1", "conv"}))
      output_attention.insert((*m)[0]);
  }
  if (inputs.empty() || outputs.empty())
    fail(what, ": the UNet has no input_blocks/output_blocks tensors (found e.g. 'model.diffusion_model.",
         keys.front(), "'); this is not a Stable Diffusion 1.x/2.x checkpoint");
  UNetLayout u;
  const int last_in = *inputs.rbegin();
  u.layers = ops.empty() ? last_in : *ops.begin() - 1;
  u.levels = static_cast<int>(ops.size()) + 1;
  const int span = u.layers + 1;
  bool ok = u.layers >= 1 && last_in == u.levels * span - 1 && *outputs.rbegin() == u.levels * span - 1;
  int k = 1;
  for (int op : ops) ok = ok && op == span * k++;
  if (!ok)
    fail(what, ": unrecognised UNet block structure (input blocks 0..", last_in, ", downsamplers at ",
         ops.size(), " places, output blocks 0..", *outputs.rbegin(), ")");
  for (int b = 0; b < u.levels; ++b) u.up_attention.push_back(output_attention.count(b * span) != 0);
  return u;
}

UNetLayout unet_layout_from_diffusers(const std::vector<std::string>& names) {
  UNetLayout u;
  u.levels = count_of(names, {"down_blocks", "#"});
  u.layers = count_of(names, {"down_blocks", "#", "resnets", "#"}, 1);
  if (u.levels == 0 || u.layers == 0) fail("these UNet weights have no down_blocks.N.resnets.M tensors");
  if (count_of(names, {"up_blocks", "#"}) != u.levels)
    fail("these UNet weights have ", u.levels, " down blocks but ", count_of(names, {"up_blocks", "#"}),
         " up blocks");
  u.up_attention.assign(u.levels, false);
  for (const auto& n : names)
    if (auto m = match(n, {"up_blocks", "#", "attentions"})) u.up_attention[(*m)[0]] = true;
  return u;
}

struct VaeLayout {
  int enc_levels = 0, enc_layers = 0, dec_levels = 0, dec_layers = 0;
};

RuleTable vae_rules(const VaeLayout& v) {
  RuleTable t;
  for (std::string s : {"encoder", "decoder"}) {
    t.add(s + ".conv_in", s + ".conv_in");
    t.add(s + ".conv_out", s + ".conv_out");
    t.add(s + ".norm_out", s + ".conv_norm_out");
    t.add(s + ".mid.block_1", s + ".mid_block.resnets.0", Inner::VaeResnet);
    t.add(s + ".mid.block_2", s + ".mid_block.resnets.1", Inner::VaeResnet);
    const std::string attn = s + ".mid.attn_1", a = s + ".mid_block.attentions.0";
    t.add(attn + ".norm", a + ".group_norm");
    t.add(attn + ".q", a + ".to_q", Inner::Squeeze);
    t.add(attn + ".k", a + ".to_k", Inner::Squeeze);
    t.add(attn + ".v", a + ".to_v", Inner::Squeeze);
    t.add(attn + ".proj_out", a + ".to_out.0", Inner::Squeeze);
    // Files saved by early diffusers use the old attention names (spec §3.6).
    t.add(attn + ".q", a + ".query", Inner::Squeeze, RuleTable::kToLdmOnly);
    t.add(attn + ".k", a + ".key", Inner::Squeeze, RuleTable::kToLdmOnly);
    t.add(attn + ".v", a + ".value", Inner::Squeeze, RuleTable::kToLdmOnly);
    t.add(attn + ".proj_out", a + ".proj_attn", Inner::Squeeze, RuleTable::kToLdmOnly);
  }
  t.add("quant_conv", "quant_conv");
  t.add("post_quant_conv", "post_quant_conv");
  for (int i = 0; i < v.enc_levels; ++i) {
    const std::string ldm = "encoder.down." + str(i), diffusers = "encoder.down_blocks." + str(i);
    for (int j = 0; j < v.enc_layers; ++j)
      t.add(ldm + ".block." + str(j), diffusers + ".resnets." + str(j), Inner::VaeResnet);
    t.add(ldm + ".downsample.conv", diffusers + ".downsamplers.0.conv");
  }
  // The ldm decoder numbers its levels from the lowest resolution up: reversed.
  for (int k = 0; k < v.dec_levels; ++k) {
    const std::string ldm = "decoder.up." + str(k),
                      diffusers = "decoder.up_blocks." + str(v.dec_levels - 1 - k);
    for (int j = 0; j < v.dec_layers; ++j)
      t.add(ldm + ".block." + str(j), diffusers + ".resnets." + str(j), Inner::VaeResnet);
    t.add(ldm + ".upsample.conv", diffusers + ".upsamplers.0.conv");
  }
  return t;
}

RuleTable clip_rules() {
  RuleTable t;
  t.add("text_model", "text_model");
  for (std::string m : {"embeddings", "encoder", "final_layer_norm"}) {
    t.add(m, "text_model." + m, Inner::Same, RuleTable::kToDiffusersOnly);  // older transformers
    t.add("text_model." + m, m, Inner::Same, RuleTable::kToLdmOnly);        // prefix-less diffusers files
  }
  return t;
}

RuleTable open_clip_rules(int layers) {
  RuleTable t;
  t.add("token_embedding", "text_model.embeddings.token_embedding");
  t.add("positional_embedding", "text_model.embeddings.position_embedding.weight");
  t.add("ln_final", "text_model.final_layer_norm");
  for (int i = 0; i < layers; ++i) {
    const std::string r = "transformer.resblocks." + str(i), l = "text_model.encoder.layers." + str(i);
    t.add(r + ".ln_1", l + ".layer_norm1");
    t.add(r + ".ln_2", l + ".layer_norm2");
    t.add(r + ".mlp.c_fc", l + ".mlp.fc1");
    t.add(r + ".mlp.c_proj", l + ".mlp.fc2");
    t.add(r + ".attn", l + ".self_attn", Inner::FusedQkv);
  }
  return t;
}

// ---- Reading --------------------------------------------------------------------------------

// Training state and buffers of the ldm LatentDiffusion module: not weights of any component.
bool is_training_state(const std::string& name) {
  static const std::set<std::string> names = {"betas",
                                              "alphas_cumprod",
                                              "alphas_cumprod_prev",
                                              "sqrt_alphas_cumprod",
                                              "sqrt_one_minus_alphas_cumprod",
                                              "log_one_minus_alphas_cumprod",
                                              "sqrt_recip_alphas_cumprod",
                                              "sqrt_recipm1_alphas_cumprod",
                                              "posterior_variance",
                                              "posterior_log_variance_clipped",
                                              "posterior_mean_coef1",
                                              "posterior_mean_coef2",
                                              "logvar",
                                              "lvlb_weights",
                                              "scale_factor",
                                              "global_step",
                                              "epoch",
                                              "model_ema.decay",
                                              "model_ema.num_updates"};
  return names.count(name) != 0;
}

WeightSource::Entry raw_entry(const std::shared_ptr<SafetensorsFile>& file, const TensorRecord& rec) {
  WeightSource::Entry e;
  e.file = file;
  e.record = &rec;
  e.shape = rec.shape;
  e.origin = rec.name;
  return e;
}

// Adds the stored tensor `rec` (ldm key `key`, prefix stripped) under its diffusers name(s). A
// key no rule covers is added under its stored name, so that finish() reports it.
void add_mapped(WeightSource& src, const std::shared_ptr<SafetensorsFile>& file, const TensorRecord& rec,
                const std::string& key, const RuleTable& table) {
  std::vector<Mapped> mapped = table.to_diffusers(key);
  if (mapped.empty()) {
    src.add(rec.name, raw_entry(file, rec));
    return;
  }
  for (const Mapped& m : mapped) {
    WeightSource::Entry e = raw_entry(file, rec);
    const Shape& s = rec.shape;
    if (m.inner == Inner::Squeeze && s.size() == 4 && s[2] == 1 && s[3] == 1) {
      e.shape = {s[0], s[1]};
      e.transform = [shape = e.shape](const Tensor& t) { return t.reshaped(shape); };
    } else if (m.parts > 1) {
      if (s.empty() || s[0] % m.parts)
        fail("'", rec.name, "' in ", file->path().string(), " has shape ", shape_str(s),
             ", which does not split into q, k and v");
      const int64_t rows = s[0] / m.parts, begin = rows * m.part;
      e.shape[0] = rows;
      e.transform = [begin, rows](const Tensor& t) { return t.slice0(begin, begin + rows).clone(); };
    }
    src.add(m.name, e);
  }
}

std::vector<std::string> stripped(const std::vector<const TensorRecord*>& recs, std::string_view prefix) {
  std::vector<std::string> out;
  for (const auto* r : recs) out.push_back(r->name.substr(prefix.size()));
  return out;
}

// Names a likely kind for a file that is no SD 1.x/2.x checkpoint, for the error message.
std::string describe_other(const SafetensorsFile& f) {
  bool diffusers_unet = false, diffusers_vae = false, text = false;
  for (const auto& t : f.tensors()) {
    diffusers_unet |= starts_with(t.name, "down_blocks.") || t.name == "conv_in.weight";
    diffusers_vae |= starts_with(t.name, "encoder.down_blocks.");
    text |= starts_with(t.name, "text_model.");
  }
  if (diffusers_unet) return "; it looks like a diffusers UNet file: open its model folder instead";
  if (diffusers_vae) return "; it looks like a diffusers VAE file: open its model folder instead";
  if (text) return "; it looks like a text encoder file: open its model folder instead";
  std::string examples;
  for (size_t i = 0; i < f.tensors().size() && i < 3; ++i)
    examples += (i ? "', '" : " (e.g. '") + f.tensors()[i].name;
  return cat("; it has ", f.tensors().size(), " tensors", examples.empty() ? "" : examples + "')");
}

void read_unet(SingleFileCheckpoint& ck, const std::shared_ptr<SafetensorsFile>& file,
               const std::vector<const TensorRecord*>& recs,
               const std::map<std::string, const TensorRecord*>& ema, bool use_ema, const std::string& what) {
  const std::vector<std::string> keys = stripped(recs, kUNetPrefix);
  const RuleTable table = unet_rules(unet_layout_from_ldm(keys, what));
  ck.has_ema = ema.size() > 100;
  ck.used_ema = use_ema && ck.has_ema;
  ck.unet = std::make_shared<WeightSource>("unet (in " + what + ")");
  int first_attention = -1;
  for (size_t i = 0; i < recs.size(); ++i) {
    const TensorRecord* rec = recs[i];
    if (ck.used_ema) {
      auto it = ema.find(ldm_ema_name(rec->name));
      if (it == ema.end())
        fail(what, ": the EMA weights lack '", ldm_ema_name(rec->name), "' (for '", rec->name,
             "'); load without EMA");
      if (it->second->shape != rec->shape)
        fail(what, ": EMA tensor '", it->first, "' has shape ", shape_str(it->second->shape), ", but '",
             rec->name, "' has ", shape_str(rec->shape));
      rec = it->second;
    }
    add_mapped(*ck.unet, file, *rec, keys[i], table);
    if (keys[i] == "input_blocks.0.0.weight" && rec->shape.size() == 4)
      ck.unet_in_channels = static_cast<int>(rec->shape[1]);
    if (auto m =
            match(keys[i], {"input_blocks", "#", "1", "transformer_blocks", "0", "attn2", "to_k", "weight"});
        m && (first_attention < 0 || (*m)[0] < first_attention) && !rec->shape.empty()) {
      first_attention = (*m)[0];
      ck.cross_attention_dim = static_cast<int>(rec->shape.back());
    }
  }
}

std::shared_ptr<WeightSource> read_vae(const std::shared_ptr<SafetensorsFile>& file,
                                       const std::vector<const TensorRecord*>& recs,
                                       const std::string& what) {
  const std::vector<std::string> keys = stripped(recs, kVaePrefix);
  VaeLayout v;
  v.enc_levels = count_of(keys, {"encoder", "down", "#"});
  v.enc_layers = count_of(keys, {"encoder", "down", "#", "block", "#"}, 1);
  v.dec_levels = count_of(keys, {"decoder", "up", "#"});
  v.dec_layers = count_of(keys, {"decoder", "up", "#", "block", "#"}, 1);
  const RuleTable table = vae_rules(v);
  auto src = std::make_shared<WeightSource>("vae (in " + what + ")");
  for (size_t i = 0; i < recs.size(); ++i) add_mapped(*src, file, *recs[i], keys[i], table);
  return src;
}

std::shared_ptr<WeightSource> read_clip(const std::shared_ptr<SafetensorsFile>& file,
                                        const std::vector<const TensorRecord*>& recs, const std::string& what,
                                        std::string_view prefix = kClipPrefix) {
  const std::vector<std::string> keys = stripped(recs, prefix);
  const RuleTable table = clip_rules();
  auto src = std::make_shared<WeightSource>("text encoder (in " + what + ")");
  for (size_t i = 0; i < recs.size(); ++i) add_mapped(*src, file, *recs[i], keys[i], table);
  src->ignore("text_model.embeddings.position_ids");  // a buffer, not a weight
  return src;
}

// SD2 conditions on the penultimate OpenCLIP block: the last `transformer.resblocks` block is
// dropped (the converter's `resblocks.23`), as are text_projection and logit_scale.
std::shared_ptr<WeightSource> read_open_clip(const std::shared_ptr<SafetensorsFile>& file,
                                             const std::vector<const TensorRecord*>& recs,
                                             const std::string& what) {
  const std::vector<std::string> keys = stripped(recs, kOpenClipPrefix);
  const int blocks = count_of(keys, {"transformer", "resblocks", "#"});
  if (blocks < 2) fail(what, ": the OpenCLIP text encoder has ", blocks, " blocks; expected SD2's 24");
  const RuleTable table = open_clip_rules(blocks - 1);
  auto src = std::make_shared<WeightSource>("text encoder (in " + what + ")");
  for (size_t i = 0; i < recs.size(); ++i) {
    auto m = match(keys[i], {"transformer", "resblocks", "#"});
    if ((m && (*m)[0] == blocks - 1) || keys[i] == "text_projection" || keys[i] == "logit_scale") {
      src->add(recs[i]->name, raw_entry(file, *recs[i]));
      src->ignore(recs[i]->name);
    } else {
      add_mapped(*src, file, *recs[i], keys[i], table);
    }
  }
  return src;
}

// SDXL's OpenCLIP bigG: every block (SDXL takes hidden_states[-2] of the whole tower) and
// text_projection, stored (hidden, projection) for x @ P: transposed into diffusers'
// text_projection.weight (projection, hidden). logit_scale is not a text-tower weight.
std::shared_ptr<WeightSource> read_sdxl_open_clip(const std::shared_ptr<SafetensorsFile>& file,
                                                  const std::vector<const TensorRecord*>& recs,
                                                  const std::string& what) {
  const std::vector<std::string> keys = stripped(recs, kSdxlOpenClipPrefix);
  const RuleTable table = open_clip_rules(count_of(keys, {"transformer", "resblocks", "#"}));
  auto src = std::make_shared<WeightSource>("text encoder 2 (in " + what + ")");
  for (size_t i = 0; i < recs.size(); ++i) {
    const TensorRecord& rec = *recs[i];
    if (keys[i] == "logit_scale") {
      src->add(rec.name, raw_entry(file, rec));
      src->ignore(rec.name);
    } else if (keys[i] == "text_projection") {
      if (rec.shape.size() != 2)
        fail(what, ": '", rec.name, "' has shape ", shape_str(rec.shape), "; expected (hidden, projection)");
      WeightSource::Entry e = raw_entry(file, rec);
      e.shape = {rec.shape[1], rec.shape[0]};
      e.transform = [](const Tensor& t) {
        Tensor out = Tensor::empty({t.dim(1), t.dim(0)});
        for (int64_t r = 0; r < t.dim(0); ++r)
          for (int64_t c = 0; c < t.dim(1); ++c) out[c * t.dim(0) + r] = t[r * t.dim(1) + c];
        return out;
      };
      src->add("text_projection.weight", e);
    } else {
      add_mapped(*src, file, rec, keys[i], table);
    }
  }
  return src;
}

}  // namespace

std::string ldm_ema_name(const std::string& unet_key) {
  std::string rest = unet_key.substr(unet_key.find('.') + 1);  // without "model."
  rest.erase(std::remove(rest.begin(), rest.end(), '.'), rest.end());
  return std::string(kEmaPrefix) + rest;
}

SingleFileCheckpoint open_single_file(const std::filesystem::path& path, bool use_ema) {
  auto file = SafetensorsFile::open(path);
  const std::string what = "'" + path.string() + "'";
  SingleFileCheckpoint ck;
  std::vector<const TensorRecord*> unet, vae, clip, open_clip, sdxl_clip, sdxl_open_clip;
  std::map<std::string, const TensorRecord*> ema;
  bool v_pred_marker = false;
  for (const TensorRecord& rec : file->tensors()) {
    const std::string& n = rec.name;
    if (n == "v_pred" || n == "ztsnr") {  // markers (their values mean nothing)
      (n == "v_pred" ? v_pred_marker : ck.zero_snr) = true;
      continue;
    }
    if (starts_with(n, kSdxlClipPrefix)) {
      sdxl_clip.push_back(&rec);
      continue;
    }
    if (starts_with(n, kSdxlOpenClipPrefix)) {
      sdxl_open_clip.push_back(&rec);
      continue;
    }
    if (starts_with(n, "conditioner."))
      fail(what, " has the SDXL conditioner tensor '", n, "', which is not SDXL base's (CLIP as "
           "conditioner.embedders.0.transformer, OpenCLIP as conditioner.embedders.1.model): an SDXL refiner? "
           "Only SDXL base-style single files are supported");
    if (n == "global_step" && rec.numel() == 1) {
      bool integer = rec.dtype != DType::F16 && rec.dtype != DType::BF16 && rec.dtype != DType::F32 &&
                     rec.dtype != DType::F64;
      ck.global_step = integer ? file->to_i64(rec)[0] : static_cast<int64_t>(file->to_f64(rec)[0]);
    }
    if (starts_with(n, kUNetPrefix)) {
      unet.push_back(&rec);
    } else if (is_training_state(n)) {
      continue;
    } else if (starts_with(n, kEmaPrefix)) {
      ema[n] = &rec;
    } else if (starts_with(n, kVaePrefix)) {
      vae.push_back(&rec);
    } else if (starts_with(n, kClipPrefix)) {
      clip.push_back(&rec);
    } else if (starts_with(n, kOpenClipPrefix)) {
      open_clip.push_back(&rec);
    } else {
      ck.unrecognized.push_back(n);
    }
  }
  if (unet.empty())
    fail(what,
         " is not a Stable Diffusion 1.x/2.x single-file checkpoint: it has no 'model.diffusion_model.' "
         "tensors",
         describe_other(*file));
  if (!clip.empty() && !open_clip.empty())
    fail(what, " has two text encoders (CLIP and OpenCLIP); not an SD 1.x/2.x checkpoint");
  if (!sdxl_clip.empty() || !sdxl_open_clip.empty()) {
    if (sdxl_clip.empty() || sdxl_open_clip.empty() || !clip.empty() || !open_clip.empty())
      fail(what, " is an incomplete Stable Diffusion XL checkpoint: it has ", sdxl_clip.size(), " tensors under '",
           kSdxlClipPrefix, "' and ", sdxl_open_clip.size(), " under '", kSdxlOpenClipPrefix, "' (and ",
           clip.size() + open_clip.size(), " of SD 1.x/2.x text encoders); SDXL has both towers and only those");
    read_unet(ck, file, unet, ema, use_ema, what);
    if (!vae.empty()) ck.vae = read_vae(file, vae, what);
    ck.text_encoder = read_clip(file, sdxl_clip, what, kSdxlClipPrefix);
    ck.text_encoder_2 = read_sdxl_open_clip(file, sdxl_open_clip, what);
    ck.family = Family::SDXL;
    ck.v_prediction = v_pred_marker;
    return ck;
  }

  read_unet(ck, file, unet, ema, use_ema, what);
  if (!vae.empty()) ck.vae = read_vae(file, vae, what);
  if (!clip.empty()) ck.text_encoder = read_clip(file, clip, what);
  if (!open_clip.empty()) ck.text_encoder = read_open_clip(file, open_clip, what);

  // The text encoder's form decides the family; without one, SD2's 1024-wide cross-attention.
  if (!open_clip.empty())
    ck.family = Family::SD2;
  else if (!clip.empty())
    ck.family = Family::SD1;
  else
    ck.family = ck.cross_attention_dim == 1024 ? Family::SD2 : Family::SD1;
  ck.v_prediction = v_pred_marker || (ck.family == Family::SD2 && ck.global_step.value_or(-1) != 875000);
  return ck;
}

// ---- ControlNet single files ----------------------------------------------------------------

namespace {

constexpr std::string_view kControlNetPrefix = "control_model.";

// The ControlNet-only modules: input_hint_block (its convolutions: the first is conv_in, the last
// conv_out, the ones between blocks.0, 1, …; SiLUs hold the odd indices), zero_convs.K.0 and
// middle_block_out.0.
void add_controlnet_rules(RuleTable& t, const std::vector<std::string>& keys) {
  std::set<int> hint;
  for (const auto& k : keys)
    if (auto m = match(k, {"input_hint_block", "#", "weight"})) hint.insert((*m)[0]);
  int block = 0;
  for (int i : hint) {
    const std::string ldm = "input_hint_block." + str(i);
    if (i == *hint.begin())
      t.add(ldm, "controlnet_cond_embedding.conv_in");
    else if (i == *hint.rbegin())
      t.add(ldm, "controlnet_cond_embedding.conv_out");
    else
      t.add(ldm, "controlnet_cond_embedding.blocks." + str(block++));
  }
  const int zero_convs = count_of(keys, {"zero_convs", "#"});
  for (int k = 0; k < zero_convs; ++k) t.add("zero_convs." + str(k) + ".0", "controlnet_down_blocks." + str(k));
  t.add("middle_block_out.0", "controlnet_mid_block");
}

// Levels and layers per block from where the downsamplers `input_blocks.n.0.op` sit (a ControlNet
// has no output blocks).
UNetLayout controlnet_layout(const std::vector<std::string>& keys, const std::string& what) {
  std::set<int> inputs, ops;
  for (const auto& k : keys) {
    if (auto m = match(k, {"input_blocks", "#"})) inputs.insert((*m)[0]);
    if (auto m = match(k, {"input_blocks", "#", "0", "op"})) ops.insert((*m)[0]);
  }
  if (inputs.empty()) fail(what, ": the ControlNet has no input_blocks tensors");
  UNetLayout u;
  const int last_in = *inputs.rbegin();
  u.layers = ops.empty() ? last_in : *ops.begin() - 1;
  u.levels = static_cast<int>(ops.size()) + 1;
  bool ok = u.layers >= 1 && last_in == u.levels * (u.layers + 1) - 1;
  int k = 1;
  for (int op : ops) ok = ok && op == (u.layers + 1) * k++;
  if (!ok)
    fail(what, ": unrecognised ControlNet block structure (input blocks 0..", last_in, ", downsamplers at ",
         ops.size(), " places)");
  u.up_attention.assign(u.levels, false);
  return u;
}

}  // namespace

std::shared_ptr<WeightSource> open_controlnet_single_file(const std::filesystem::path& path) {
  auto file = SafetensorsFile::open(path);
  const std::string what = "'" + path.string() + "'";
  // lllyasviel's files prefix every key with "control_model."; some (e.g. thibaud's SD 2.1
  // ControlNets) store them bare, which diffusers recognises by time_embed.0.weight.
  const bool bare = file->find("time_embed.0.weight") != nullptr;
  const std::string_view prefix = bare ? std::string_view() : kControlNetPrefix;
  std::vector<const TensorRecord*> recs;
  for (const TensorRecord& rec : file->tensors())
    if (starts_with(rec.name, prefix)) recs.push_back(&rec);
  std::vector<std::string> keys = stripped(recs, prefix);
  const bool hint = std::any_of(keys.begin(), keys.end(), [](const std::string& k) {
    return starts_with(k, "input_hint_block.");
  });
  if (recs.empty() || !hint)
    fail(what, " is not a ControlNet checkpoint (no 'control_model.input_hint_block' tensors)", describe_other(*file));
  RuleTable table = unet_rules(controlnet_layout(keys, what));
  add_controlnet_rules(table, keys);
  auto src = std::make_shared<WeightSource>("ControlNet " + what);
  for (size_t i = 0; i < recs.size(); ++i) add_mapped(*src, file, *recs[i], keys[i], table);
  for (const TensorRecord& rec : file->tensors())  // anything else is reported by finish()
    if (!starts_with(rec.name, prefix) && !is_training_state(rec.name)) src->add(rec.name, raw_entry(file, rec));
  return src;
}

// ---- Writing --------------------------------------------------------------------------------

std::vector<LdmTensorPlan> plan_ldm_tensors(LdmComponent component,
                                            const std::vector<NamedShape>& diffusers) {
  std::vector<std::string> names;
  for (const auto& d : diffusers) names.push_back(d.name);
  RuleTable table;
  std::string prefix;
  int text_layers = 0;
  switch (component) {
    case LdmComponent::UNet:
      table = unet_rules(unet_layout_from_diffusers(names));
      prefix = kUNetPrefix;
      break;
    case LdmComponent::Vae: {
      VaeLayout v;
      v.enc_levels = count_of(names, {"encoder", "down_blocks", "#"});
      v.enc_layers = count_of(names, {"encoder", "down_blocks", "#", "resnets", "#"}, 1);
      v.dec_levels = count_of(names, {"decoder", "up_blocks", "#"});
      v.dec_layers = count_of(names, {"decoder", "up_blocks", "#", "resnets", "#"}, 1);
      table = vae_rules(v);
      prefix = kVaePrefix;
      break;
    }
    case LdmComponent::ClipText:
      table = clip_rules();
      prefix = kClipPrefix;
      break;
    case LdmComponent::OpenClipText:
      text_layers = count_of(names, {"text_model", "encoder", "layers", "#"});
      table = open_clip_rules(text_layers);
      prefix = kOpenClipPrefix;
      break;
    case LdmComponent::SdxlClipText:
      table = clip_rules();
      prefix = kSdxlClipPrefix;
      break;
    case LdmComponent::SdxlOpenClipText:
      table = open_clip_rules(count_of(names, {"text_model", "encoder", "layers", "#"}));
      prefix = kSdxlOpenClipPrefix;
      break;
  }

  std::vector<LdmTensorPlan> plans;
  std::map<std::string, size_t> index;
  std::map<std::string, Shape> part_shape;  // fused tensors: the shape every part must have
  for (const auto& d : diffusers) {
    if (component == LdmComponent::SdxlOpenClipText && d.name == "text_projection.weight" && d.shape.size() == 2) {
      plans.push_back({prefix + "text_projection", {d.shape[1], d.shape[0]}, {d.name}, /*transposed=*/true});
      continue;
    }
    std::optional<Mapped> m = table.to_ldm(d.name);
    if (!m) fail("diffusers tensor '", d.name, "' has no counterpart in a single-file checkpoint");
    const std::string key = prefix + m->name;
    auto [it, inserted] = index.emplace(key, plans.size());
    if (inserted) plans.push_back({key, d.shape, std::vector<std::string>(m->parts)});
    LdmTensorPlan& p = plans[it->second];
    if (p.sources.size() != static_cast<size_t>(m->parts) || !p.sources[m->part].empty())
      fail("diffusers tensors '", p.sources[0], "' and '", d.name, "' both map to '", key, "'");
    p.sources[m->part] = d.name;
    if (m->parts > 1) {
      if (inserted) {
        part_shape[key] = d.shape;
        p.shape[0] *= m->parts;
      } else if (part_shape[key] != d.shape) {
        fail("'", d.name, "' has shape ", shape_str(d.shape), " unlike the other parts of '", key, "'");
      }
    } else if (m->inner == Inner::Squeeze && d.shape.size() == 2) {
      p.shape = {d.shape[0], d.shape[1], 1, 1};
    }
  }
  for (const auto& p : plans)
    for (const auto& s : p.sources)
      if (s.empty()) fail("'", p.name, "' needs q, k and v projections; some are missing");

  if (component == LdmComponent::SdxlOpenClipText) plans.push_back({prefix + "logit_scale", {}, {}});
  if (component == LdmComponent::OpenClipText && text_layers > 0) {
    // A faithful SD2 file has one more block (dropped when read) and the projection head.
    const std::string last = prefix + "transformer.resblocks." + str(text_layers - 1) + ".";
    const std::string extra = prefix + "transformer.resblocks." + str(text_layers) + ".";
    const size_t n = plans.size();
    int64_t width = 0;
    for (size_t i = 0; i < n; ++i) {
      if (starts_with(plans[i].name, last))
        plans.push_back({extra + plans[i].name.substr(last.size()), plans[i].shape, {}});
      if (plans[i].name == prefix + "token_embedding.weight") width = plans[i].shape.at(1);
    }
    if (width > 0) plans.push_back({prefix + "text_projection", {width, width}, {}});
  }
  return plans;
}

void store_floats(const float* src, int64_t n, DType dtype, uint8_t* dst) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, sizeof(float) * n);
      return;
    case DType::F16:
    case DType::BF16:
      parallel_for(
          n,
          [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) {
              uint16_t h = dtype == DType::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
              std::memcpy(dst + 2 * i, &h, 2);
            }
          },
          1 << 16);
      return;
    default:
      fail("weights cannot be stored as ", dtype_name(dtype), "; use F32, F16 or BF16");
  }
}

void write_single_file(const std::filesystem::path& path, const SingleFileContents& contents, DType dtype) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    fail("weights cannot be stored as ", dtype_name(dtype), "; use F32, F16 or BF16");
  std::vector<TensorToWrite> out;
  // Per component: diffusers name → tensor (names may repeat across components).
  std::vector<std::map<std::string, const DiffusersTensor*>> lookups;
  lookups.reserve(4);  // the fill callbacks keep references into it
  auto add = [&](LdmComponent component, const std::vector<DiffusersTensor>& tensors) {
    if (tensors.empty()) return;
    std::vector<NamedShape> shapes;
    auto& lookup = lookups.emplace_back();
    for (const auto& t : tensors) {
      shapes.push_back({t.name, t.shape});
      lookup[t.name] = &t;
    }
    for (LdmTensorPlan& plan : plan_ldm_tensors(component, shapes)) {
      TensorToWrite w;
      w.name = plan.name;
      w.dtype = dtype;
      w.shape = plan.shape;
      w.fill = [plan = std::move(plan), &lookup, &contents, dtype](uint8_t* dst, size_t) {
        const int64_t n = shape_numel(plan.shape);
        std::vector<float> staging;
        float* values = reinterpret_cast<float*>(dst);  // the writer's buffer is suitably aligned
        if (dtype != DType::F32) {
          staging.resize(n);
          values = staging.data();
        }
        if (plan.sources.empty()) {
          if (contents.fill_unused)
            contents.fill_unused(plan.name, plan.shape, values);
          else
            std::fill(values, values + n, 0.0f);
        } else if (plan.transposed) {  // (rows, cols) source → (cols, rows)
          const int64_t cols = plan.shape.at(0), rows = plan.shape.at(1);
          std::vector<float> source(n);
          lookup.at(plan.sources[0])->values(source.data());
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) values[c * rows + r] = source[r * cols + c];
        } else {
          int64_t offset = 0;
          for (const auto& source : plan.sources) {
            const DiffusersTensor* t = lookup.at(source);
            t->values(values + offset);
            offset += shape_numel(t->shape);
          }
        }
        if (dtype != DType::F32) store_floats(values, n, dtype, dst);
      };
      out.push_back(std::move(w));
    }
  };
  add(LdmComponent::UNet, contents.unet);
  add(LdmComponent::Vae, contents.vae);
  if (contents.family == Family::SDXL) {
    add(LdmComponent::SdxlClipText, contents.text_encoder);
    add(LdmComponent::SdxlOpenClipText, contents.text_encoder_2);
  } else {
    if (!contents.text_encoder_2.empty()) fail("a second text encoder is written in SDXL checkpoints only");
    add(contents.family == Family::SD2 ? LdmComponent::OpenClipText : LdmComponent::ClipText, contents.text_encoder);
  }
  for (const auto& e : contents.extra) out.push_back(e);
  write_safetensors(path, out, contents.metadata);
}

}  // namespace octodiff
