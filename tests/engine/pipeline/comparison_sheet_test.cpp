// Comparison sheets: axis parsing (and its errors), the planner's expansion and grouping, and
// every cell of a sheet bit-identical to the single run with that cell's settings.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/png.h"
#include "pipeline/comparison_sheet.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

GenerationRequest base_request() {
  GenerationRequest r;
  r.prompts = {"a red circle on a blue background"};
  r.steps = 2;
  r.seed = 5;
  return r;
}

std::shared_ptr<const StableDiffusionModel> tiny_model() {
  static auto model = StableDiffusionModel::load(test::tiny_sd_dir());
  return model;
}

// Runs every cell alone (one prompt, one device, its seed) and compares it with the sheet's cell
// byte for byte; returns the number of cells compared.
int expect_cells_equal_single_runs(const SheetResult& sheet, ShardedPipeline& pipe) {
  int compared = 0;
  for (size_t c = 0; c < sheet.plan.cells.size(); ++c) {
    const SheetCell& cell = sheet.plan.cells[c];
    const GenerationResult single = pipe.run(cell.request);
    EXPECT_EQ(single.signature.devices, 1);
    EXPECT_EQ(single.device_keys.at(0), cell.key);
    const Tensor image = sheet.cell_image(static_cast<int>(c));
    EXPECT_EQ(single.images.numel(), image.numel());
    if (single.images.numel() != image.numel()) continue;
    const bool same = std::memcmp(single.images.data(), image.data(), sizeof(float) * image.numel()) == 0;
    float max_diff = 0;
    for (int64_t i = 0; i < image.numel(); ++i) max_diff = std::max(max_diff, std::abs(single.images[i] - image[i]));
    std::printf("[cell %zu] x%d y%d: seed %lld guidance %g prompt '%s' run %d device %d: %s (max |diff| %g)\n", c,
                cell.x, cell.y, static_cast<long long>(cell.request.seed), cell.request.guidance_scale,
                cell.request.prompts[0].c_str(), sheet.cell_run(static_cast<int>(c)),
                sheet.cell_device(static_cast<int>(c)), same ? "bit-identical" : "DIFFERS",
                static_cast<double>(max_diff));
    EXPECT_TRUE(same) << "cell " << c;
    ++compared;
  }
  return compared;
}

}  // namespace

TEST(ComparisonSheet, ParsesAxes) {
  const SheetAxis g = parse_sheet_axis("guidance=3, 7.5");
  EXPECT_EQ(g.kind, SheetAxisKind::Guidance);
  ASSERT_EQ(g.size(), 2);
  EXPECT_EQ(g.values[1].number, 7.5);
  EXPECT_EQ(g.label(1), "guidance 7.5");
  const SheetAxis s = parse_sheet_axis("seed=1-3,42");
  ASSERT_EQ(s.size(), 4);
  EXPECT_EQ(s.values[2].integer, 3);
  EXPECT_EQ(s.values[3].integer, 42);
  const SheetAxis k = parse_sheet_axis("scheduler=ddim,euler-a");
  EXPECT_EQ(k.values[1].scheduler, SchedulerKind::EulerAncestral);
  const SheetAxis p = parse_sheet_axis(R"(prompt=red,"green, bright",blue)");
  ASSERT_EQ(p.size(), 3);
  EXPECT_EQ(p.values[0].text, "red");
  EXPECT_EQ(p.values[1].text, "green, bright");
  const SheetAxis q = parse_sheet_axis(R"(prompt=red,"say ""hi""",)");
  ASSERT_EQ(q.size(), 3);
  EXPECT_EQ(q.values[1].text, "say \"hi\"");
  EXPECT_EQ(q.values[2].text, "");  // S/R may remove the search text
  EXPECT_EQ(parse_sheet_axis("steps=2,3").values[1].integer, 3);
  EXPECT_EQ(parse_sheet_axis("lora=0,0.5,1").size(), 3);
  EXPECT_EQ(parse_sheet_axis("strength=0.3,1").values[0].number, 0.3);
  const SheetSpec spec = parse_sheet_spec("guidance=3,7.5", "seed=1,2,3", "steps=2,3");
  EXPECT_EQ(spec.cells(), 12);
  EXPECT_EQ(spec.size(2), 2);
}

TEST(ComparisonSheet, BadAxesAreClearErrors) {
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("colour=red,blue"); }), "unknown sheet axis 'colour'"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("colour=red,blue"); }), "seed, guidance"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("guidance"); }), "NAME=V1,V2"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("guidance="); }), "the guidance axis has no values"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("guidance= "); }), "has no values"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("guidance=3,,7.5"); }), "empty value"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("guidance=3,high"); }), "'high' is not a number"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("guidance=3,nan"); }), "'nan' is not a number"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("seed=1,2.5"); }), "'2.5' is not a whole number"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("seed=9-3"); }), "reversed"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("steps=0,3"); }), "0 is not in 1"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("strength=0.5,1.5"); }), "1.5 is not in (0, 1]"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("scheduler=ddim,warp"); }), "unknown scheduler 'warp'"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis("prompt=,red"); }), "cannot be empty"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_axis(R"(prompt="red,blue)"); }), "not closed"));
  const std::string too_many = error_of([] { parse_sheet_spec("seed=1-8", "guidance=1,2,3,4,5,6,7,8,9"); });
  EXPECT_TRUE(contains(too_many, "8 × 9 = 72 cells; at most 64")) << too_many;
  EXPECT_TRUE(contains(error_of([] { parse_sheet_spec("seed=1,2", "seed=3,4"); }), "seed axis is given twice"));
  EXPECT_TRUE(contains(error_of([] { parse_sheet_spec("seed=1,2", "", "steps=2,3"); }), "needs a Y axis"));
  EXPECT_EQ(error_of([] { parse_sheet_spec("prompt=red,blue", "prompt=circle,star"); }), "");
}

TEST(ComparisonSheet, PlanExpandsCellsAndGroupsRuns) {
  const SheetPlan plan = plan_sheet(parse_sheet_spec("guidance=3,7.5", "seed=1,2"), base_request(), 0);
  ASSERT_EQ(plan.cells.size(), 4u);
  const SheetCell& c = plan.cells[plan.cell_index(1, 0, 0)];  // x = guidance 7.5, y = seed 1
  EXPECT_EQ(c.request.guidance_scale, 7.5);
  EXPECT_EQ(c.request.seed, 1);
  EXPECT_EQ(c.request.devices, 1);
  EXPECT_EQ(c.key, jax::split(jax::prng_key(1), 1, jax::RngScheme::Classic)[0]);
  // Two guidance scales: two runs; the seeds are devices of one run.
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_EQ(plan.runs[0].cells, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.runs[1].cells, (std::vector<int>{1, 3}));
  EXPECT_EQ(plan.runs[0].request.devices, 2);
  EXPECT_EQ(plan.runs[0].request.device_keys[1], plan.cells[2].key);
  EXPECT_EQ(plan.runs[0].request.guidance_scale, 3.0);

  // Prompt S/R × seed: one run of six devices; the negative prompt is replaced too.
  GenerationRequest base = base_request();
  base.negative_prompts = {"red"};
  const SheetPlan pr = plan_sheet(parse_sheet_spec("prompt=red,green,yellow", "seed=1,2"), base, 0);
  ASSERT_EQ(pr.runs.size(), 1u);
  EXPECT_EQ(pr.runs[0].request.prompts[1], "a green circle on a blue background");
  EXPECT_EQ(pr.runs[0].request.negative_prompts[2], "yellow");
  EXPECT_EQ(pr.runs[0].request.prompts[3], "a red circle on a blue background");
  // At most max_devices cells a run.
  const SheetPlan split = plan_sheet(parse_sheet_spec("seed=1-5", "steps=2,3"), base_request(), 0, {2});
  ASSERT_EQ(split.runs.size(), 6u);  // per steps value: 2 + 2 + 1 devices
  EXPECT_EQ(split.runs[2].cells, (std::vector<int>{4}));
  EXPECT_EQ(split.runs[3].request.steps, 3);
  // Schedulers, LoRA strengths and strengths run apart.
  EXPECT_EQ(plan_sheet(parse_sheet_spec("scheduler=ddim,euler"), base_request(), 0).runs.size(), 2u);
  EXPECT_EQ(plan_sheet(parse_sheet_spec("lora=0,1", "seed=1,2"), base_request(), 1).runs.size(), 2u);
}

TEST(ComparisonSheet, PlanRefusesWhatItCannotVary) {
  GenerationRequest two = base_request();
  two.prompts.push_back("a star");
  EXPECT_TRUE(contains(error_of([&] { plan_sheet(parse_sheet_spec("seed=1,2"), two, 0); }), "varies one prompt"));
  EXPECT_TRUE(contains(error_of([] { plan_sheet(parse_sheet_spec("lora=0,1"), base_request(), 0); }),
                       "no LoRA is loaded"));
  EXPECT_TRUE(contains(error_of([] { plan_sheet(parse_sheet_spec("strength=0.5,1"), base_request(), 0); }),
                       "give an init image"));
  EXPECT_TRUE(contains(error_of([] { plan_sheet(parse_sheet_spec("prompt=purple,red"), base_request(), 0); }),
                       "did not find 'purple'"));
  GenerationRequest injected = base_request();
  injected.latents = Tensor::zeros({1, 1, 4, 8, 8});
  EXPECT_TRUE(contains(error_of([&] { plan_sheet(parse_sheet_spec("seed=1,2"), injected, 0); }), "injected"));
}

// The parity of item 5: guidance 3, 7.5 × seed 1, 2 on the tiny model, 2 steps.
TEST(ComparisonSheet, CellsEqualSingleRunsBitForBit) {
  auto pipe = std::make_shared<ShardedPipeline>(tiny_model());
  const SheetPlan plan = plan_sheet(parse_sheet_spec("guidance=3,7.5", "seed=1,2"), base_request(), 0);
  SheetRunner runner(pipe);
  int started = 0;
  SheetCallbacks callbacks;
  callbacks.run_started = [&](int, int runs, const SheetRun& run) {
    EXPECT_EQ(runs, 2);
    EXPECT_EQ(run.request.devices, 2);
    ++started;
  };
  const SheetResult sheet = runner.run(plan, callbacks);
  EXPECT_EQ(started, 2);
  ASSERT_EQ(sheet.images.shape(), (Shape{1, 2, 2, sheet.images.dim(3), sheet.images.dim(4), 3}));
  EXPECT_FALSE(sheet.runs[1].result.compiled);  // the same signature: the plan is cached
  EXPECT_EQ(expect_cells_equal_single_runs(sheet, *pipe), 4);
}

// Stochastic schedulers draw step noise from the device key: a prompt S/R × seed sheet with
// Euler ancestral (one run of four devices) equals four single runs too.
TEST(ComparisonSheet, StochasticSchedulerCellsEqualSingleRuns) {
  auto pipe = std::make_shared<ShardedPipeline>(tiny_model());
  GenerationRequest base = base_request();
  base.scheduler = SchedulerKind::EulerAncestral;
  base.steps = 3;
  const SheetPlan plan = plan_sheet(parse_sheet_spec("prompt=red,green", "seed=1,2"), base, 0);
  ASSERT_EQ(plan.runs.size(), 1u);
  SheetRunner runner(pipe);
  const SheetResult sheet = runner.run(plan);
  EXPECT_EQ(expect_cells_equal_single_runs(sheet, *pipe), 4);
}

TEST(ComparisonSheet, CellMetadataIsTheSingleRuns) {
  auto pipe = std::make_shared<ShardedPipeline>(tiny_model());
  const SheetPlan plan = plan_sheet(parse_sheet_spec("seed=3,4", "prompt=red,green"), base_request(), 0);
  SheetRunner runner(pipe);
  const SheetResult sheet = runner.run(plan);
  const ImageMetadata m = describe_sheet_cell(sheet, plan.cell_index(1, 1, 0));
  EXPECT_EQ(m.seed, 4);
  EXPECT_EQ(m.prompts, (std::vector<std::string>{"a green circle on a blue background"}));
  EXPECT_EQ(m.devices, 1);
  EXPECT_EQ(m.device, 0);
  EXPECT_FALSE(m.injected_latents);
  EXPECT_EQ(*m.device_key, jax::split(jax::prng_key(4), 1, jax::RngScheme::Classic)[0]);
  // The written PNGs carry it, and their request makes the same image again.
  const auto dir = test::temp_dir("comparison_sheet_cells");
  const auto paths = save_sheet_cell_pngs(dir, sheet);
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[3].filename().string(), "cell-4-x2-y2.png");
  const auto read = parse_png_metadata(read_png_text(paths[3]));
  ASSERT_TRUE(read.has_value());
  const GenerationResult again = pipe->run(request_from_metadata(*read));
  const Tensor cell = sheet.cell_image(3);
  EXPECT_EQ(std::memcmp(again.images.data(), cell.data(), sizeof(float) * cell.numel()), 0);
}

// The clip-skip axis: one run per clip skip (a run's prompts share it), every cell the single run
// at that clip skip, and its PNG says it.
TEST(ComparisonSheet, ClipSkipCellsEqualSingleRuns) {
  auto pipe = std::make_shared<ShardedPipeline>(tiny_model());
  const SheetSpec spec = parse_sheet_spec("clip-skip=1-2", "seed=1,2");
  EXPECT_EQ(spec.axes[0].label(1), "clip skip 2");
  const SheetPlan plan = plan_sheet(spec, base_request(), 0);
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_EQ(plan.runs[1].request.clip_skip, 2);
  SheetRunner runner(pipe);
  const SheetResult sheet = runner.run(plan);
  EXPECT_EQ(expect_cells_equal_single_runs(sheet, *pipe), 4);
  EXPECT_GT(test::diff(sheet.cell_image(plan.cell_index(0, 0, 0)), sheet.cell_image(plan.cell_index(1, 0, 0))).max_abs,
            0.0);
  EXPECT_EQ(describe_sheet_cell(sheet, plan.cell_index(1, 0, 0)).clip_skip, 2);
  EXPECT_NE(error_of([] { parse_sheet_spec("clip-skip=0,1"); }).find("the clip-skip axis: 0 is not in 1…48"),
            std::string::npos);
}

// A1111's "DPM++ 2M" against "DPM++ 2M Karras": the scheduler axis's -karras values; and DPM++ 2M
// SDE (stochastic: each step's noise from the cell's key) with Karras sigmas.
TEST(ComparisonSheet, KarrasCellsEqualSingleRuns) {
  auto pipe = std::make_shared<ShardedPipeline>(tiny_model());
  const SheetSpec spec =
      parse_sheet_spec("scheduler=dpm++,dpm++-karras,Euler-Karras,DPM++-SDE-Karras", "seed=1,2");
  EXPECT_EQ(spec.axes[0].label(0), "dpm++");
  EXPECT_EQ(spec.axes[0].label(1), "dpm++ karras");
  EXPECT_EQ(spec.axes[0].label(2), "euler karras");
  EXPECT_EQ(spec.axes[0].label(3), "dpm++-sde karras");
  GenerationRequest base = base_request();
  base.steps = 3;
  const SheetPlan plan = plan_sheet(spec, base, 0);
  ASSERT_EQ(plan.runs.size(), 4u);
  EXPECT_EQ(plan.runs[0].request.karras_sigmas, std::optional(false));
  EXPECT_EQ(plan.runs[1].request.karras_sigmas, std::optional(true));
  EXPECT_EQ(plan.runs[3].request.scheduler, std::optional(SchedulerKind::DpmSolverSde));
  SheetRunner runner(pipe);
  const SheetResult sheet = runner.run(plan);
  EXPECT_EQ(expect_cells_equal_single_runs(sheet, *pipe), 8);
  EXPECT_GT(test::diff(sheet.cell_image(plan.cell_index(0, 0, 0)), sheet.cell_image(plan.cell_index(1, 0, 0))).max_abs,
            0.0);
  EXPECT_EQ(describe_sheet_cell(sheet, plan.cell_index(1, 0, 0)).karras_sigmas, std::optional(true));
  EXPECT_NE(
      error_of([] {
        parse_sheet_spec("scheduler=pndm-karras");
      }).find("the scheduler axis: pndm-karras: only lms, dpm++, dpm++-sde and euler have Karras sigmas"),
      std::string::npos);
}

// Guidance rescale φ × seed: one run per φ (the run key holds it), each cell its single run, the
// φ in its metadata; values outside [0, 1] refused.
TEST(ComparisonSheet, GuidanceRescaleCellsEqualSingleRuns) {
  auto pipe = std::make_shared<ShardedPipeline>(tiny_model());
  const SheetSpec spec = parse_sheet_spec("guidance-rescale=0,0.7", "seed=1,2");
  EXPECT_EQ(spec.axes[0].label(1), "CFG rescale 0.7");
  GenerationRequest base = base_request();
  base.steps = 3;
  const SheetPlan plan = plan_sheet(spec, base, 0);
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_EQ(plan.runs[1].request.guidance_rescale, 0.7);
  SheetRunner runner(pipe);
  const SheetResult sheet = runner.run(plan);
  EXPECT_EQ(expect_cells_equal_single_runs(sheet, *pipe), 4);
  EXPECT_GT(test::diff(sheet.cell_image(plan.cell_index(0, 0, 0)), sheet.cell_image(plan.cell_index(1, 0, 0)))
                .max_abs,
            0.0);
  EXPECT_EQ(describe_sheet_cell(sheet, plan.cell_index(1, 0, 0)).guidance_rescale, 0.7);
  EXPECT_NE(error_of([] {
              parse_sheet_spec("guidance-rescale=0.5,1.2");
            }).find("the guidance-rescale axis: 1.2 is not in [0, 1]"),
            std::string::npos);
}

// Image-to-image: strength × seed; the posterior noise also comes from each cell's key.
TEST(ComparisonSheet, StrengthCellsEqualSingleRuns) {
  ModelLoadOptions o;
  o.load_vae_encoder = true;
  auto pipe = std::make_shared<ShardedPipeline>(StableDiffusionModel::load(test::tiny_sd_dir(), o));
  GenerationRequest base = base_request();
  base.steps = 4;
  Image8 init{64, 64, {}};
  for (int i = 0; i < 64 * 64; ++i) init.rgb.insert(init.rgb.end(), {uint8_t(i % 251), uint8_t(i / 64 * 3), 90});
  base.init_images = {init};
  const SheetPlan plan = plan_sheet(parse_sheet_spec("strength=0.5,1", "seed=1,2"), base, 0);
  ASSERT_EQ(plan.runs.size(), 2u);
  SheetRunner runner(pipe);
  const SheetResult sheet = runner.run(plan);
  EXPECT_EQ(sheet.runs[0].result.signature.strength, 0.5);
  EXPECT_EQ(expect_cells_equal_single_runs(sheet, *pipe), 4);
}

// The lora axis: each strength is the model with_loras at that strength (made once per sheet).
TEST(ComparisonSheet, LoraStrengthCellsEqualSingleRuns) {
  ModelLoadOptions o;
  o.loras = {{test::data_dir() / "tiny-sd-lora" / "kohya.safetensors", 1.0f}};
  auto model = StableDiffusionModel::load(test::tiny_sd_dir(), o);
  const SheetPlan plan = plan_sheet(parse_sheet_spec("lora=0,0.5,1", "seed=1,2"), base_request(), 1);
  ASSERT_EQ(plan.runs.size(), 3u);
  SheetRunner runner(std::make_shared<ShardedPipeline>(model));
  const SheetResult sheet = runner.run(plan);
  EXPECT_EQ(sheet.runs[2].model, model);  // strength 1: the model as loaded
  EXPECT_FLOAT_EQ(sheet.runs[1].model->loras().at(0).spec.strength, 0.5f);
  const ImageMetadata m = describe_sheet_cell(sheet, plan.cell_index(1, 0, 0));
  ASSERT_EQ(m.loras.size(), 1u);
  EXPECT_FLOAT_EQ(m.loras[0].strength, 0.5f);
  for (int strength = 0; strength < 3; ++strength) {
    const float s = 0.5f * static_cast<float>(strength);
    ShardedPipeline single(StableDiffusionModel::with_loras(model, {{o.loras[0].path, s}}));
    for (int y = 0; y < 2; ++y) {
      const int c = plan.cell_index(strength, y, 0);
      const GenerationResult one = single.run(plan.cells[c].request);
      const Tensor image = sheet.cell_image(c);
      const bool same = std::memcmp(one.images.data(), image.data(), sizeof(float) * image.numel()) == 0;
      std::printf("[lora %g seed %d] %s\n", static_cast<double>(s), y + 1, same ? "bit-identical" : "DIFFERS");
      EXPECT_TRUE(same);
    }
  }
  // The strengths change the images (the LoRA is not a no-op on this model).
  EXPECT_NE(std::memcmp(sheet.cell_image(0).data(), sheet.cell_image(2).data(), sizeof(float) * 64 * 64 * 3), 0);
}
