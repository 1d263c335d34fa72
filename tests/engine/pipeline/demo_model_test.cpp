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
#include "pipeline/few_step.h"
#include "pipeline/sharded_pipeline.h"
#include "shape_class.h"
#include "test_support.h"

using namespace octodiff;
using nlohmann::json;

namespace {

// The embedded demo model (resources/demo-model) is few-step since 26 Nov: version 2's UNet distilled
// into an LCM UNet (tools/demo-model/train_lcm.py), run at the values the app and CLI give it
// (pipeline/few_step.h: LCM, 4 steps, guidance 8). resources/demo-model-ddim is its teacher, the
// version-2 model as it shipped before (DDIM, its own scheduler, 50 steps, guidance 7.5): the
// few-step default must follow the prompts at least as well as it does.
// Thresholds below what version 2 measured through this engine at DDIM 50: held-out agreement 0.979,
// shape class 1.000 (version 1: 0.958 and 0.188); the complaint prompts colours 9/9 and shapes 8/9
// (version 1: 6/9 and 2/9).
constexpr double kAgreementAtLeast = 0.90;
constexpr double kShapeClassAtLeast = 0.90;
constexpr int kComplaintColoursAtLeast = 8, kComplaintShapesAtLeast = 7;
constexpr int kFewStepsAtMost = 8;  // issue 20.7: the default grid in at most 8 steps

const json& heldout() {
  static json j = json::parse(read_text_file(std::filesystem::path(OCTODIFF_SOURCE_DIR) / "tools" /
                                             "demo-model" / "heldout.json"));
  return j;
}

using Model = std::shared_ptr<const StableDiffusionModel>;

Model demo_model() {
  static auto m = StableDiffusionModel::load(StableDiffusionModel::default_model_path());
  return m;
}

Model ddim_model() {
  static auto m = StableDiffusionModel::load(std::filesystem::path(OCTODIFF_SOURCE_DIR) / "resources" / "demo-model-ddim");
  return m;
}

// What the app and the CLI run the model with when the user names nothing.
SamplingValues defaults(const Model& m) { return recognize_few_step(*m).values; }

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
  double shape_rgb[3] = {0, 0, 0};  // the shape's median colour (when there is a shape)
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
    std::copy(sc, sc + 3, m.shape_rgb);
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
// images per device (each with its own noise), with the app's defaults for the model but the
// guidance given (the embedded model: LCM, 4 steps; the DDIM one: its own DDIM, 50 steps; flax
// compat). Returns the images device-major: prompt 0's first.
std::vector<Image8> generate(const Model& model, const std::vector<std::string>& prompts, int per_prompt,
                             double guidance, const std::string& negative = "", int64_t seed = 0) {
  ShardedPipeline pipe(model);
  GenerationRequest r;
  r.steps = defaults(model).steps;
  r.scheduler = defaults(model).scheduler;
  for (const auto& p : prompts) r.prompts.insert(r.prompts.end(), per_prompt, p);
  r.devices = static_cast<int>(prompts.size());
  r.batch_per_device = per_prompt;
  if (!negative.empty()) r.negative_prompts = {negative};
  r.seed = seed;
  r.guidance_scale = guidance;
  return result_images(pipe.run(r));
}

struct HeldOutRates {
  double agreement = 0;    // colours, background and position all right
  double shape_class = 0;  // the shape the caption names (test::classify_shape)
  double everything = 0;   // both: colours, background, position and the shape itself
  double colour_error = 0; // mean RGB distance of the shape's median colour from the named one (0–441)
};

// Shape class right per shape: "circle 12/12, square 8/8, …" (prompts' shapes in order of appearance).
std::string per_shape_counts(const std::vector<std::pair<std::string, bool>>& shape_right) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<int, int>> counts;
  for (const auto& [shape, right] : shape_right) {
    if (!counts.count(shape)) order.push_back(shape);
    counts[shape].first += right;
    counts[shape].second += 1;
  }
  std::string out;
  for (const auto& shape : order)
    out += (out.empty() ? "" : ", ") + shape + " " + std::to_string(counts[shape].first) + "/" +
           std::to_string(counts[shape].second);
  return out;
}

HeldOutRates heldout_rates(const Model& model, double guidance) {
  static std::map<std::pair<const void*, double>, HeldOutRates> measured;  // several tests share a run
  const std::pair<const void*, double> key{model.get(), guidance};
  if (measured.count(key)) return measured[key];
  std::vector<std::string> prompts;
  for (const auto& e : heldout()["prompts"]) prompts.push_back(e["prompt"].get<std::string>());
  const int per_prompt = 4;
  auto images = generate(model, prompts, per_prompt, guidance);
  int agree = 0, colours = 0, position = 0, everything = 0;
  double colour_error = 0;
  std::vector<std::pair<std::string, bool>> shape_right;
  for (size_t i = 0; i < images.size(); ++i) {
    const json& e = heldout()["prompts"][i / per_prompt];
    Measurement m = measure(images[i]);
    const bool c = m.shape_colour == e["shape_colour"].get<std::string>() && m.background == e["background"].get<std::string>();
    const bool p = position_ok(e["position"].get<std::string>(), m);
    colours += c;
    position += p;
    const json& named = heldout()["palette_rgb"][e["shape_colour"].get<std::string>()];
    double d2 = 0;
    for (int k = 0; k < 3; ++k) d2 += std::pow(m.shape_rgb[k] - named[k].get<double>(), 2);
    colour_error += m.shape_colour ? std::sqrt(d2) : 441.7;  // no shape: the largest distance
    agree += c && p;
    const std::string shape = e["shape"].get<std::string>();
    shape_right.emplace_back(shape, test::classify_shape(images[i]).shape == shape);
    everything += c && p && shape_right.back().second;
  }
  const double n = static_cast<double>(images.size());
  const double shapes = static_cast<double>(std::count_if(shape_right.begin(), shape_right.end(),
                                                          [](const auto& s) { return s.second; }));
  std::printf("[demo] %s, %d steps, held-out captions, guidance %.1f: agreement %d/%zu = %.3f (colours %.3f, position %.3f); "
              "shape class %.3f (%s); all of it %.3f; shape colour off by %.1f RGB\n",
              model == demo_model() ? "embedded (LCM)" : "DDIM teacher", defaults(model).steps, guidance, agree,
              images.size(), agree / n, colours / n, position / n, shapes / n,
              per_shape_counts(shape_right).c_str(), everything / n, colour_error / n);
  return measured[key] = {agree / n, shapes / n, everything / n, colour_error / n};
}

HeldOutRates default_rates(const Model& model) { return heldout_rates(model, defaults(model).guidance); }

}  // namespace

TEST(DemoModel, HeldOutCaptionsMatchTheirImages) {
  EXPECT_GE(default_rates(demo_model()).agreement, kAgreementAtLeast);
}

// Issue 20.7: the shape itself, not only its colour — points, holes, corners.
TEST(DemoModel, ShapeClassMatchesThePrompt) {
  EXPECT_GE(default_rates(demo_model()).shape_class, kShapeClassAtLeast);
}

// Issue 20.7: the default grid in at most 8 steps, following the prompts (colours, background,
// position and the shape) at least as well as the model did at 50 steps before it went few-step.
TEST(DemoModel, TheFewStepDefaultFollowsPromptsAsWellAsTheDdimModelAt50Steps) {
  const SamplingValues fast = defaults(demo_model()), slow = defaults(ddim_model());
  EXPECT_EQ(recognize_few_step(*demo_model()).kind, FewStepKind::LcmDistilled);
  EXPECT_LE(fast.steps, kFewStepsAtMost);
  EXPECT_EQ(slow.steps, 50);
  EXPECT_EQ(ddim_model()->default_scheduler(), SchedulerKind::Ddim);
  const HeldOutRates few = default_rates(demo_model()), teacher = default_rates(ddim_model());
  std::printf("[demo] everything right: embedded %d steps %.3f, DDIM teacher %d steps %.3f\n", fast.steps, few.everything,
              slow.steps, teacher.everything);
  EXPECT_GE(few.everything, teacher.everything);  // measured 48/48 against 47/48
}

// The three prompts a new user tried (issue 20.7), seeds 0, 1 and 2 as the app makes them (one
// image each, the app's defaults): "a red star on a blue background" gave a red blob, "a yellow
// ring on a black background" a yellow blob without a hole, "a big green triangle on a white
// background" an orange blob on green.
TEST(DemoModel, TheComplaintPromptsGetTheirColoursAndShapes) {
  struct Complaint {
    const char* prompt;
    const char* colour;
    const char* background;
    const char* shape;
  };
  const Complaint complaints[] = {{"a red star on a blue background", "red", "blue", "star"},
                                  {"a yellow ring on a black background", "yellow", "black", "ring"},
                                  {"a big green triangle on a white background", "green", "white", "triangle"}};
  int colours_right = 0, shapes_right = 0, images = 0;
  for (const Complaint& c : complaints) {
    std::string seen;
    for (int64_t seed : {0, 1, 2}) {
      const Image8 img = generate(demo_model(), {c.prompt}, 1, defaults(demo_model()).guidance, "", seed).at(0);
      const Measurement m = measure(img);
      const std::optional<std::string> shape = test::classify_shape(img).shape;
      colours_right += m.shape_colour == c.colour && m.background == c.background;
      shapes_right += shape == c.shape;
      ++images;
      seen += " seed " + std::to_string(seed) + ": " + m.shape_colour.value_or("no") + " " + shape.value_or("shape") +
              " on " + m.background + ";";
    }
    std::printf("[demo] '%s':%s\n", c.prompt, seen.c_str());
  }
  std::printf("[demo] complaint prompts: colours %d/%d, shape class %d/%d\n", colours_right, images, shapes_right,
              images);
  EXPECT_GE(colours_right, kComplaintColoursAtLeast);
  EXPECT_GE(shapes_right, kComplaintShapesAtLeast);
}

// Guidance makes the pictures follow the prompt more. Measured on everything the prompt says
// (colours, background, position and the shape): version 2 at DDIM 50 gets colours and positions
// right even unguided (agreement 0.979 at guidance 1 and at 7.5), the shapes come with guidance
// (0.833 -> 1.000). The LCM default takes the guidance as an input of its UNet (one pass a step);
// it gets everything right at guidance 1 too (1.000 both), so there the measure is how close the
// shapes' colours come to the named ones: guidance 8 brings them closer.
TEST(DemoModel, MoreGuidanceFollowsThePromptMore) {
  const HeldOutRates ddim_weak = heldout_rates(ddim_model(), 1.0), ddim_strong = default_rates(ddim_model());
  EXPECT_GT(ddim_strong.everything, ddim_weak.everything);
  const HeldOutRates lcm_weak = heldout_rates(demo_model(), 1.0), lcm_strong = default_rates(demo_model());
  EXPECT_GE(lcm_strong.everything, lcm_weak.everything);
  EXPECT_LT(lcm_strong.colour_error, lcm_weak.colour_error);
}

// An LCM-distilled UNet runs one pass on the prompts alone: a negative prompt does nothing, and the
// run says so (the app greys the field out for such a model).
TEST(DemoModel, ARunSaysWhenItsNegativePromptIsNotUsed) {
  ShardedPipeline pipe(demo_model());
  GenerationRequest r;
  r.prompts = {"a large red circle on a blue background"};
  r.negative_prompts = {"red"};
  r.steps = defaults(demo_model()).steps;
  const GenerationResult got = pipe.run(r);
  ASSERT_EQ(got.warnings.size(), 1u);
  EXPECT_NE(got.warnings[0].find("negative prompt is not used"), std::string::npos) << got.warnings[0];
  r.negative_prompts.clear();
  EXPECT_TRUE(pipe.run(r).warnings.empty());
  // The same with a guided model at guidance <= 1 (one pass on the prompts alone).
  ShardedPipeline ddim(ddim_model());
  r.negative_prompts = {"red"};
  r.steps = 2;
  r.guidance_scale = 1.0;
  const GenerationResult unguided = ddim.run(r);
  ASSERT_EQ(unguided.warnings.size(), 1u);
  EXPECT_NE(unguided.warnings[0].find("at guidance <= 1"), std::string::npos) << unguided.warnings[0];
  r.guidance_scale = 7.5;
  EXPECT_TRUE(ddim.run(r).warnings.empty());
}

// The DDIM model (classifier-free guidance: the negative prompt is the unconditional half).
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
  auto base = colour_counts(generate(ddim_model(), prompts, per_prompt, 7.5, "", 100));
  int total_without = 0, total_with = 0;
  for (const char* colour : {"red", "green", "blue", "yellow", "orange", "purple"}) {
    auto with = colour_counts(generate(ddim_model(), prompts, per_prompt, 7.5, colour, 100));
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
