#include "distributed/sweep.h"

#include <charconv>
#include <fstream>

#include "core/error.h"

namespace octodiff {
namespace {

int64_t parse_seed(const std::string& text, const std::string& whole) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0)
    fail("--seeds '", whole, "': expected A-B or A with non-negative whole numbers (e.g. 0-99)");
  return v;
}

}  // namespace

SeedRange parse_seed_range(const std::string& text) {
  const size_t dash = text.find('-');
  SeedRange r;
  r.first = parse_seed(text.substr(0, dash), text);
  r.last = dash == std::string::npos ? r.first : parse_seed(text.substr(dash + 1), text);
  if (r.last < r.first) fail("--seeds '", text, "': the last seed is smaller than the first");
  if (r.count() > kMaxSweepItems) fail("--seeds '", text, "': ", r.count(), " seeds; at most ", kMaxSweepItems);
  return r;
}

std::vector<std::string> read_prompts_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read the prompts file '", path.string(), "'");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    prompts.push_back(line);
  }
  if (in.bad()) fail("error reading the prompts file '", path.string(), "'");
  if (prompts.empty()) fail("the prompts file '", path.string(), "' has no prompts (one per line)");
  return prompts;
}

std::vector<SweepItem> enumerate_sweep_items(const std::vector<std::string>& prompts, SeedRange seeds) {
  if (prompts.empty()) fail("a sweep needs at least one prompt");
  const int64_t n = static_cast<int64_t>(prompts.size()) * seeds.count();
  if (n > kMaxSweepItems)
    fail(prompts.size(), " prompts × ", seeds.count(), " seeds = ", n, " items; at most ", kMaxSweepItems);
  std::vector<SweepItem> items;
  items.reserve(n);
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int64_t s = seeds.first; s <= seeds.last; ++s)
      items.push_back({static_cast<int>(items.size()), static_cast<int>(p), s, prompts[p]});
  return items;
}

std::string sweep_item_stem(const SweepItem& item) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "p%04d-s%lld", item.prompt_index, static_cast<long long>(item.seed));
  return buf;
}

std::string sweep_item_file(const SweepItem& item, int batch_index, int batch) {
  return sweep_item_stem(item) + (batch > 1 ? cat("-", batch_index + 1) : std::string()) + ".png";
}

jax::Key sweep_item_key(int64_t seed, jax::RngScheme rng) { return jax::split(jax::prng_key(seed), 1, rng)[0]; }

void check_sweepable(const GenerationRequest& base) {
  if (base.latents || base.step_noise || base.posterior_noise || base.masked_posterior_noise)
    fail("a sweep draws every item's noise from its seed: --latents and the injected noises cannot be used");
  if (base.init_images.size() > 1 || base.masks.size() > 1)
    fail("a sweep takes one --init-image (and one --mask) for every item");
  for (const ControlNetUse& c : base.controlnets)
    if (c.images.size() > 1) fail("a sweep takes one --control-image per ControlNet for every item");
  if (!base.device_keys.empty()) fail("a sweep gives every item its own key");
  if (base.negative_prompts.size() > 1) fail("a sweep takes one negative prompt for every item");
}

GenerationRequest sweep_group_request(const GenerationRequest& base, const std::vector<SweepItem>& items) {
  check_sweepable(base);
  if (items.empty()) fail("an empty group of sweep items");
  GenerationRequest req = base;
  const int B = base.batch_per_device;
  req.devices = static_cast<int>(items.size());
  req.prompts.clear();
  req.device_keys.clear();
  for (const SweepItem& item : items) {
    req.prompts.insert(req.prompts.end(), B, item.prompt);
    req.device_keys.push_back(sweep_item_key(item.seed, base.rng));
  }
  return req;
}

GenerationRequest sweep_item_request(const GenerationRequest& base, const SweepItem& item) {
  GenerationRequest req = base;
  req.prompts = {item.prompt};
  req.devices = 1;
  req.seed = item.seed;
  return req;
}

GenerationResult sweep_item_result(const GenerationResult& group, int g) {
  const int B = group.signature.batch;
  if (g < 0 || g >= group.signature.devices) fail("device ", g, " of a group of ", group.signature.devices);
  GenerationResult r;
  r.signature = group.signature;
  r.signature.devices = 1;
  r.compiled = group.compiled;
  r.images = group.images.slice0(g, g + 1).clone();
  r.initial_latents = group.initial_latents.slice0(g, g + 1).clone();
  r.final_latents = group.final_latents.slice0(g, g + 1).clone();
  r.device_keys = {group.device_keys.at(g)};
  r.prompts.assign(group.prompts.begin() + int64_t{g} * B, group.prompts.begin() + int64_t{g + 1} * B);
  r.negative_prompts.assign(group.negative_prompts.begin() + int64_t{g} * B,
                            group.negative_prompts.begin() + int64_t{g + 1} * B);
  r.warnings = group.warnings;
  r.embeddings = group.embeddings;
  if (g < static_cast<int>(group.context_tokens.size())) r.context_tokens = {group.context_tokens[g]};
  r.model_calls = group.model_calls;
  r.threads_per_device = group.threads_per_device;
  r.concurrent_devices = 1;
  r.timings = group.timings;
  r.peak_rss_bytes = group.peak_rss_bytes;
  return r;
}

}  // namespace octodiff
