// Sweeps beyond eight: many prompts × many seeds, each pair a device-sized work item.
//
// Item (prompt p, seed s) is exactly the one-device run `generate --prompt P --seed S`: its key is
// split(PRNGKey(s), 1)[0] and its B images are that run's. Items are grouped into runs of G
// devices, each device with its item's prompt and key (GenerationRequest::device_keys), so a
// group of G items costs one G-device run and gives each item the images its plain run gives.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "pipeline/generation.h"

namespace octodiff {

struct SeedRange {
  int64_t first = 0, last = 0;  // inclusive
  int64_t count() const { return last - first + 1; }
};

// "A-B" (A ≤ B) or a single seed "A"; seeds are non-negative. At most kMaxSweepItems seeds.
SeedRange parse_seed_range(const std::string& text);

// One prompt per line; blank lines are skipped, a trailing '\r' removed. Errors name the file.
std::vector<std::string> read_prompts_file(const std::filesystem::path& path);

struct SweepItem {
  int index = 0;         // position in the sweep (prompt-major: all seeds of prompt 0 first)
  int prompt_index = 0;  // into the sweep's prompts
  int64_t seed = 0;
  std::string prompt;
};

constexpr int64_t kMaxSweepItems = 1000000;

// Every (prompt, seed) pair, prompt-major. Throws when there are none or more than kMaxSweepItems.
std::vector<SweepItem> enumerate_sweep_items(const std::vector<std::string>& prompts, SeedRange seeds);

// The file name stem of an item's images: "p0003-s42" (B = 1) — image b of B > 1 adds "-<b+1>".
std::string sweep_item_stem(const SweepItem& item);
std::string sweep_item_file(const SweepItem& item, int batch_index, int batch);

// The key the one-device run with this seed gives its device: split(PRNGKey(seed), 1)[0].
jax::Key sweep_item_key(int64_t seed, jax::RngScheme rng);

// The run of a group of items: `base`'s settings, one device per item with its prompt and key.
// `base` may carry no per-device inputs (latents, noises, more than one init image/mask/control
// image): they belong to a run of fixed devices, not to a sweep.
GenerationRequest sweep_group_request(const GenerationRequest& base, const std::vector<SweepItem>& items);

// The request of item's plain one-device run (its metadata: the seed and prompt).
GenerationRequest sweep_item_request(const GenerationRequest& base, const SweepItem& item);

// Device g of a group's result as the plain one-device run's result.
GenerationResult sweep_item_result(const GenerationResult& group, int g);

// Throws when `base` has per-device inputs a sweep cannot take (see sweep_group_request).
void check_sweepable(const GenerationRequest& base);

}  // namespace octodiff
