// The embedded demo model through the C++ engine, on caption combinations kept out of its
// training (tools/demo-model/heldout.json): do the pictures match the prompts? The image
// measurement is the one heldout.json defines (background = median border colour, shape = pixels
// far from it, colours = nearest palette entry, position = centroid rules).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/files.h"
#include "pipeline/export.h"
#include "pipeline/sharded_pipeline.h"
#include "test_support.h"

using namespace octodiff;
using nlohmann::json;

namespace {

const json& heldout() {
  static json j = json::parse(read_text_file(std::filesystem::path(OCTODIFF_SOURCE_DIR) / "tools" /
                                             "demo-model" / "heldout.json"));
  return j;
}

std::shared_ptr<const StableDiffusionModel> demo_model() {
  static auto m = StableDiffusionModel::load(StableDiffusionModel::default_model_path());
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string nearest_colour(const double rgb[3]) {
  // Palette order as in heldout.json (ties go to the first entry).
  std::string best;
  double best_d = INFINITY;
  for (const auto& [name, c] : heldout()["palette_rgb"].items()) {
    double d = 0;
    for (int k = 0; k < 3; ++k) d += (rgb[k] - c[k].get<double>()) * (rgb[k] - c[k].get<double>());
    if (d < best_d) best_d = d, best = name;
  }
  return best;
}

struct Measurement {
  std::string background;
  std::optional<std::string> shape_colour;
  double cx = 0, cy = 0;
};

Measurement measure(const Image8& img) {
  const auto& rule = heldout()["measurement"];
  const int border = 2;
  const double dist = 60.0;
  const int min_pixels = rule["min_region_pixels"].get<int>();
  const int W = img.width, H = img.height;
  auto px = [&](int x, int y, int c) { return static_cast<double>(img.rgb[(static_cast<size_t>(y) * W + x) * 3 + c]); };
  double bg[3];
  for (int c = 0; c < 3; ++c) {
    std::vector<double> v;
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        if (x < border || y < border || x >= W - border || y >= H - border) v.push_back(px(x, y, c));
    bg[c] = median(v);
  }
  Measurement m;
  m.background = nearest_colour(bg);
  std::vector<double> region[3];
  double sx = 0, sy = 0;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      double d2 = 0;
      for (int c = 0; c < 3; ++c) d2 += (px(x, y, c) - bg[c]) * (px(x, y, c) - bg[c]);
      if (std::sqrt(d2) > dist) {
        for (int c = 0; c < 3; ++c) region[c].push_back(px(x, y, c));
        sx += x;
        sy += y;
      }
    }
  const size_t n = region[0].size();
  if (static_cast<int>(n) >= min_pixels) {
    double sc[3] = {median(region[0]), median(region[1]), median(region[2])};
    m.shape_colour = nearest_colour(sc);
    m.cx = sx / n;
    m.cy = sy / n;
  }
  return m;
}

bool position_ok(const std::string& position, const Measurement& m) {
  if (!m.shape_colour) return false;
  std::istringstream words(position);
  std::string w;
  while (words >> w) {
    if (w == "left" && !(m.cx < 26)) return false;
    if (w == "right" && !(m.cx > 37)) return false;
    if (w == "top" && !(m.cy < 26)) return false;
    if (w == "bottom" && !(m.cy > 37)) return false;
    if (w == "centre" && !(m.cx >= 20 && m.cx <= 43 && m.cy >= 20 && m.cy <= 43)) return false;
  }
  return true;
}

// Generates `per_prompt` images of every prompt in one run: one device per prompt, `per_prompt`
// images per device (each with its own noise), with the app's defaults (PNDM, 50 steps, flax
// compat). Returns the images device-major: prompt 0's images first.
std::vector<Image8> generate(const std::vector<std::string>& prompts, int per_prompt, double guidance,
                             const std::string& negative = "", int64_t seed = 0) {
  ShardedPipeline pipe(demo_model());
  GenerationRequest r;
  for (const auto& p : prompts) r.prompts.insert(r.prompts.end(), per_prompt, p);
  r.devices = static_cast<int>(prompts.size());
  r.batch_per_device = per_prompt;
  if (!negative.empty()) r.negative_prompts = {negative};
  r.seed = seed;
  r.guidance_scale = guidance;
  return result_images(pipe.run(r));
}

double heldout_agreement(double guidance) {
  static std::map<double, double> measured;  // both tests use guidance 7.5: generate once
  if (measured.count(guidance)) return measured[guidance];
  std::vector<std::string> prompts;
  for (const auto& e : heldout()["prompts"]) prompts.push_back(e["prompt"].get<std::string>());
  const int per_prompt = 4;
  auto images = generate(prompts, per_prompt, guidance);
  int agree = 0, colours = 0, position = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const json& e = heldout()["prompts"][i / per_prompt];
    Measurement m = measure(images[i]);
    const bool c = m.shape_colour == e["shape_colour"].get<std::string>() && m.background == e["background"].get<std::string>();
    const bool p = position_ok(e["position"].get<std::string>(), m);
    colours += c;
    position += p;
    agree += c && p;
  }
  const double n = static_cast<double>(images.size());
  std::printf("[demo] held-out captions, guidance %.1f: agreement %d/%zu = %.3f (colours %.3f, position %.3f)\n",
              guidance, agree, images.size(), agree / n, colours / n, position / n);
  return measured[guidance] = agree / n;
}

}  // namespace

TEST(DemoModel, HeldOutCaptionsMatchTheirImages) {
  EXPECT_GE(heldout_agreement(7.5), 0.80);
}

TEST(DemoModel, MoreGuidanceAgreesMore) {
  const double weak = heldout_agreement(1.0), strong = heldout_agreement(7.5);
  EXPECT_GT(strong, weak);
}

TEST(DemoModel, NegativePromptMakesTheNamedColourRarer) {
  // Prompts that name no shape colour, so the model picks one; a negative prompt names one.
  const std::vector<std::string> prompts = {"a large circle on a white background", "a large square on a black background",
                                            "a large star on a grey background", "a large triangle on a white background"};
  const int per_prompt = 12;  // 48 images per condition
  auto colour_counts = [](const std::vector<Image8>& images) {
    std::map<std::string, int> counts;
    for (const auto& im : images)
      if (auto c = measure(im).shape_colour) counts[*c]++;
    return counts;
  };
  auto base = colour_counts(generate(prompts, per_prompt, 7.5, "", 100));
  int total_without = 0, total_with = 0;
  for (const char* colour : {"red", "green", "blue", "yellow", "orange", "purple"}) {
    auto with = colour_counts(generate(prompts, per_prompt, 7.5, colour, 100));
    std::printf("[demo] negative prompt '%s': %s shapes %d/48 without -> %d/48 with\n", colour, colour, base[colour],
                with[colour]);
    total_without += base[colour];
    total_with += with[colour];
    if (base[colour] >= 3) {
      EXPECT_LT(with[colour], base[colour]) << colour;
    }
  }
  std::printf("[demo] named colours overall: %d without -> %d with the negative prompt\n", total_without, total_with);
  EXPECT_LT(total_with, total_without);
}
