// octodiff-cli end to end: runs the real binary on the tiny model and checks what it writes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "io/files.h"
#include "io/npy.h"
#include "io/png.h"
#include "pipeline/metadata.h"
#include "cli_runner.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using test::CliRun;

CliRun cli(const std::vector<std::string>& args, const fs::path& cwd) { return test::run_cli(args, cwd); }

std::vector<std::string> tiny(std::vector<std::string> args) { return test::tiny_generate(std::move(args)); }

}  // namespace

TEST(Cli, EightPromptsMakeA2x4GridWhoseMetadataReadsBack) {
  auto dir = test::temp_dir("cli_grid");
  std::vector<std::string> args = tiny({"--steps", "2", "--seed", "42", "--out", "grid.png", "--out-dir", "images",
                                        "--negative-prompt", "blurry"});
  const std::vector<std::string> prompts = {"a red circle",   "a blue square",  "a green ring",  "a star",
                                            "café crème",     "東京の夜景",      "two shapes",    "a purple triangle"};
  for (const auto& p : prompts) args.insert(args.end(), {"--prompt", p});
  CliRun r = cli(args, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::vector<PngText> texts;
  Image8 grid = read_png(dir / "grid.png", &texts);
  EXPECT_EQ(grid.width, 4 * 64);
  EXPECT_EQ(grid.height, 2 * 64);
  auto meta = parse_png_metadata(texts);
  ASSERT_TRUE(meta.has_value());
  EXPECT_EQ(meta->prompts, prompts);
  EXPECT_EQ(meta->negative_prompts[0], "blurry");
  EXPECT_EQ(meta->seed, 42);
  EXPECT_EQ(meta->devices, 8);
  EXPECT_EQ(meta->scheduler, SchedulerKind::Pndm);
  EXPECT_EQ(meta->compat, Compat::Flax);
  EXPECT_FALSE(meta->model_hash.empty());
  bool a1111 = false;
  for (const auto& t : texts)
    if (t.key == "parameters") {
      a1111 = true;
      std::printf("[parameters] %s\n", t.text.c_str());
      EXPECT_NE(t.text.find("Negative prompt: blurry"), std::string::npos);
      EXPECT_NE(t.text.find("Steps: 2, Sampler: PNDM, CFG scale: 7.5, Seed: 42, Size: 64x64, Model hash: "),
                std::string::npos);
      EXPECT_NE(t.text.find("RNG: "), std::string::npos);
    }
  EXPECT_TRUE(a1111);
  // Single images carry their own prompt, device and key.
  std::vector<PngText> one;
  read_png(dir / "images" / "octodiff-42-6.png", &one);
  auto m6 = parse_png_metadata(one);
  ASSERT_TRUE(m6.has_value());
  EXPECT_EQ(m6->prompts, std::vector<std::string>{"東京の夜景"});
  EXPECT_EQ(m6->device, 5);
  ASSERT_TRUE(m6->device_key.has_value());
}

TEST(Cli, RepeatShowsCompileOnTheFirstCallOnly) {
  auto dir = test::temp_dir("cli_repeat");
  CliRun r = cli(tiny({"--prompt", "a", "--prompt", "b", "--steps", "2", "--repeat", "2", "--json", "--quiet"}), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::printf("%s", r.err.c_str());
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_TRUE(j["runs"][0]["compiled"].get<bool>());
  EXPECT_GT(j["runs"][0]["compile_seconds"].get<double>(), 0.0);
  EXPECT_FALSE(j["runs"][1]["compiled"].get<bool>());
  EXPECT_EQ(j["runs"][1]["compile_seconds"].get<double>(), 0.0);
  EXPECT_NE(r.err.find("call 1: compiled"), std::string::npos);
  EXPECT_NE(r.err.find("call 2: cached plan, no compile"), std::string::npos);
  for (const char* key : {"text_encode_seconds", "denoise_seconds", "decode_seconds", "total_seconds"})
    EXPECT_GE(j["runs"][1][key].get<double>(), 0.0) << key;
}

TEST(Cli, SavedAndInjectedLatentsRoundTrip) {
  auto dir = test::temp_dir("cli_latents");
  CliRun a = cli(tiny({"--prompt", "x", "--prompt", "y", "--steps", "2", "--seed", "3", "--rng", "partitionable",
                    "--save-latents", "lat.npy", "--save-array", "a.npy", "--out", "a.png", "--quiet"}),
              dir);
  ASSERT_EQ(a.code, 0) << a.err;
  Tensor lat = read_npy(dir / "lat.npy");
  EXPECT_EQ(lat.shape(), (Shape{2, 1, 4, 32, 32}));
  // Injecting the saved latents with another seed reproduces the images exactly.
  CliRun b = cli(tiny({"--prompt", "x", "--prompt", "y", "--steps", "2", "--seed", "999", "--latents", "lat.npy",
                    "--save-array", "b.npy", "--out", "b.png", "--quiet"}),
              dir);
  ASSERT_EQ(b.code, 0) << b.err;
  Tensor ia = read_npy(dir / "a.npy"), ib = read_npy(dir / "b.npy");
  ASSERT_EQ(ia.shape(), (Shape{2, 1, 64, 64, 3}));
  for (int64_t i = 0; i < ia.numel(); ++i) ASSERT_EQ(ia[i], ib[i]);
}

TEST(Cli, SaveLatentsReproducesJaxPerDeviceSha256) {
  // 8 devices, 64×64 latents (128×128 on the tiny model), seed 0, both RNG schemes.
  auto vectors = nlohmann::json::parse(read_text_file(test::data_dir() / "jax-prng" / "vectors.json"));
  auto dir = test::temp_dir("cli_sha");
  for (const char* mode : {"classic", "partitionable"}) {
    CliRun r = cli(tiny({"--prompt", "", "--devices", "8", "--steps", "1", "--height", "128", "--width", "128",
                      "--seed", "0", "--rng", mode, "--save-latents", "lat.npy", "--out", "g.png", "--quiet"}),
                dir);
    ASSERT_EQ(r.code, 0) << r.err;
    Tensor lat = read_npy(dir / "lat.npy");
    ASSERT_EQ(lat.shape(), (Shape{8, 1, 4, 64, 64}));
    const auto& cases = vectors["modes"][mode]["diffusers_latents"]["cases"];
    for (const auto& c : cases) {
      if (c["seed"].get<int>() != 0) continue;
      for (int d = 0; d < 8; ++d) {
        const int64_t n = 4 * 64 * 64;
        EXPECT_EQ(sha256_hex(lat.data() + d * n, sizeof(float) * n), c["devices"][d]["sha256_f32le"].get<std::string>())
            << mode << " device " << d;
      }
      std::printf("[cli] --save-latents %s seed 0: 8 device sha256 sums match\n", mode);
    }
  }
}

TEST(Cli, BadInputGetsClearErrorsAndNoPartialFiles) {
  auto dir = test::temp_dir("cli_errors");
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"generate", "--prompt", "x", "--model", "/nonexistent/model"}, "does not exist"},
      {tiny({"--prompt", "x", "--height", "90"}), "multiple of"},
      {tiny({"--prompt", "x", "--steps", "0"}), "--steps must be between"},
      {tiny({"--prompt", "x", "--scheduler", "magic"}), "magic"},
      {tiny({"--prompt", "x", "--timestep-spacing", "uniform"}),
       "unknown timestep spacing 'uniform' (valid: leading, linspace, trailing)"},
      {tiny({"--prompt", "x", "--rng", "xla"}), "xla"},
      {tiny({"--prompt", "x", "--frobnicate", "1"}), "unknown option --frobnicate"},
      {tiny({}), "--prompt"},
      {tiny({"--prompt", "1", "--prompt", "2", "--prompt", "3", "--prompt", "4", "--prompt", "5", "--prompt", "6",
             "--prompt", "7", "--prompt", "8", "--prompt", "9"}),
       "at most 8"},
      {tiny({"--prompt", "caf\xc3"}), "UTF-8"},
      {tiny({"--prompt", "x", "--latents", "missing.npy"}), "missing.npy"},
      {tiny({"--prompt", "x", "--steps", "1", "--out", "no/such/dir/grid.png"}), "no/such/dir/grid.png"},
      {{"generate", "--prompt", "x", "--model", (test::tiny_sd_dir() / "unet" / "config.json").string()},
       "config.json"},
  };
  for (const auto& c : cases) {
    CliRun r = cli(c.args, dir);
    std::printf("[cli error] exit %d: %s", r.code, r.err.c_str());
    EXPECT_NE(r.code, 0);
    EXPECT_LT(r.code, 128) << "crashed";
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
  for (const auto& e : fs::recursive_directory_iterator(dir))
    EXPECT_TRUE(e.path().filename() == "stderr.txt") << "left behind: " << e.path();
}

TEST(Cli, SchedulerDefaultsToTheModelsOwnAndCanBeOverridden) {
  auto dir = test::temp_dir("cli_scheduler");
  const fs::path model = dir / "model";
  fs::copy(test::tiny_sd_dir(), model, fs::copy_options::recursive);
  fs::remove_all(model / "goldens");
  std::ofstream(model / "scheduler" / "scheduler_config.json", std::ios::trunc)
      << R"({"_class_name": "EulerDiscreteScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
             "beta_start": 0.00085, "steps_offset": 1, "timestep_spacing": "trailing"})";
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "--model", model.string(), "--prompt", "x", "--steps", "2",
                                     "--compat", "diffusers", "--json", "--quiet", "--out", "grid.png"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliRun r = cli(args, dir);
    EXPECT_EQ(r.code, 0) << r.err;
    std::printf("%s", r.err.c_str());
    return std::pair{nlohmann::json::parse(r.out)["settings"], r.err};
  };
  auto [own, own_log] = run({});
  EXPECT_EQ(own["scheduler"], "euler");
  EXPECT_EQ(own["scheduler_class"], "EulerDiscreteScheduler");
  EXPECT_EQ(own["scheduler_is_models_own"], true);
  EXPECT_EQ(own["timestep_spacing"], "trailing");
  EXPECT_NE(own_log.find("scheduler: euler (EulerDiscreteScheduler), the model's own, timestep spacing trailing"),
            std::string::npos);
  std::vector<PngText> texts;
  read_png(dir / "grid.png", &texts);
  auto meta = parse_png_metadata(texts);
  ASSERT_TRUE(meta.has_value());
  EXPECT_EQ(meta->scheduler, SchedulerKind::Euler);
  EXPECT_TRUE(meta->scheduler_is_models_own);

  auto [ddim, ddim_log] = run({"--scheduler", "ddim", "--timestep-spacing", "linspace"});
  EXPECT_EQ(ddim["scheduler"], "ddim");
  EXPECT_EQ(ddim["scheduler_is_models_own"], false);
  EXPECT_EQ(ddim["timestep_spacing"], "linspace");
  EXPECT_EQ(ddim_log.find("the model's own"), std::string::npos);
  texts.clear();
  read_png(dir / "grid.png", &texts);
  meta = parse_png_metadata(texts);
  ASSERT_TRUE(meta.has_value());
  EXPECT_EQ(meta->scheduler, SchedulerKind::Ddim);
  EXPECT_FALSE(meta->scheduler_is_models_own);
  EXPECT_EQ(meta->timestep_spacing, TimestepSpacing::Linspace);

  CliRun help = cli({"generate", "--help"}, dir);
  EXPECT_NE(help.out.find("euler-a"), std::string::npos);
  EXPECT_NE(help.out.find("lcm"), std::string::npos);
  EXPECT_NE(help.out.find("--timestep-spacing"), std::string::npos);
}

// --karras-sigmas on|off over the scheduler configuration's use_karras_sigmas: the run says so
// (log, --json, the PNG's "Sampler: DPM++ 2M Karras"), changes the image, and is refused for a
// scheduler without them.
TEST(Cli, KarrasSigmasAreAskedForAndSaid) {
  auto dir = test::temp_dir("cli_karras");
  const auto run = [&](std::vector<std::string> extra, const std::string& name) {
    std::vector<std::string> args = {"--prompt", "a red circle", "--steps", "3", "--json"};
    for (const std::string out : {"--out", "--save-array"})
      args.insert(args.end(), {out, name + (out == "--out" ? ".png" : ".npy")});
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(tiny(args), dir);
  };
  CliRun on = run({"--scheduler", "dpm++", "--karras-sigmas", "on"}, "on");
  ASSERT_EQ(on.code, 0) << on.err;
  EXPECT_EQ(nlohmann::json::parse(on.out)["settings"]["karras_sigmas"], true);
  EXPECT_NE(on.err.find("scheduler: dpm++ (DPMSolverMultistepScheduler), timestep spacing linspace, Karras sigmas"),
            std::string::npos)
      << on.err;
  std::vector<PngText> texts;
  read_png(dir / "on.png", &texts);
  ASSERT_FALSE(texts.empty());
  bool a1111_name = false;
  for (const PngText& t : texts) a1111_name |= t.text.find("Sampler: DPM++ 2M Karras,") != std::string::npos;
  EXPECT_TRUE(a1111_name);
  const auto meta = parse_png_metadata(texts);
  ASSERT_TRUE(meta.has_value());
  EXPECT_EQ(meta->karras_sigmas, std::optional(true));

  CliRun off = run({"--scheduler", "dpm++", "--karras-sigmas", "off"}, "off");
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_EQ(nlohmann::json::parse(off.out)["settings"]["karras_sigmas"], false);
  EXPECT_NE(read_text_file(dir / "on.npy"), read_text_file(dir / "off.npy"));

  CliRun pndm = run({"--scheduler", "pndm", "--karras-sigmas", "on"}, "pndm");
  EXPECT_NE(pndm.code, 0);
  EXPECT_NE(pndm.err.find("Karras sigmas need the lms, euler, dpm++ or dpm++-sde scheduler, not pndm"),
            std::string::npos)
      << pndm.err;
  EXPECT_FALSE(fs::exists(dir / "pndm.png"));
  CliRun bad = run({"--scheduler", "euler", "--karras-sigmas", "yes"}, "bad");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--karras-sigmas expects on or off, got 'yes'"), std::string::npos) << bad.err;
  EXPECT_NE(cli({"generate", "--help"}, dir).out.find("--karras-sigmas on|off"), std::string::npos);
}

// DPM++ 2M SDE by name: it runs, says so, writes A1111's name, and reproduces itself from a seed.
TEST(Cli, DpmSdeIsAskedForAndSaid) {
  auto dir = test::temp_dir("cli_sde");
  const auto run = [&](const std::string& name) {
    return cli(tiny({"--prompt", "a red circle", "--steps", "3", "--seed", "5", "--json", "--scheduler",
                     "dpm++-sde", "--out", name + ".png", "--save-array", name + ".npy"}),
               dir);
  };
  CliRun a = run("a");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["settings"]["scheduler"], "dpm++-sde");
  EXPECT_NE(a.err.find("scheduler: dpm++-sde (DPMSolverMultistepScheduler)"), std::string::npos) << a.err;
  std::vector<PngText> texts;
  read_png(dir / "a.png", &texts);
  bool a1111_name = false;
  for (const PngText& t : texts) a1111_name |= t.text.find("Sampler: DPM++ 2M SDE,") != std::string::npos;
  EXPECT_TRUE(a1111_name);
  CliRun b = run("b");
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(read_text_file(dir / "a.npy"), read_text_file(dir / "b.npy"));  // the noise comes from the seed
  EXPECT_NE(cli({"generate", "--help"}, dir).out.find("dpm++-sde (DPM++ 2M SDE)"), std::string::npos);
}

// --zero-snr and --guidance-rescale reach the run: said on stderr and in the JSON, written in the
// PNG's A1111 settings; bad values refused by name.
TEST(Cli, ZeroSnrAndGuidanceRescaleAreAskedForAndSaid) {
  auto dir = test::temp_dir("cli_zero_snr");
  CliRun r = cli(tiny({"--prompt", "a red circle", "--steps", "3", "--json", "--scheduler", "euler",
                       "--zero-snr", "on", "--guidance-rescale", "0.7", "--out", "z.png"}),
                 dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto settings = nlohmann::json::parse(r.out)["settings"];
  EXPECT_EQ(settings["zero_snr"], true);
  EXPECT_EQ(settings["guidance_rescale"], 0.7);
  EXPECT_NE(r.err.find("noise schedule: zero terminal SNR"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("guidance rescale: 0.7\n"), std::string::npos) << r.err;
  std::vector<PngText> texts;
  read_png(dir / "z.png", &texts);
  bool said = false;
  for (const PngText& t : texts)
    said |= t.text.find("Noise Schedule: Zero Terminal SNR, CFG Rescale phi: 0.7") != std::string::npos;
  EXPECT_TRUE(said);
  CliRun pndm = cli(tiny({"--prompt", "a", "--steps", "2", "--scheduler", "pndm", "--zero-snr", "on"}), dir);
  EXPECT_NE(pndm.code, 0);
  EXPECT_NE(pndm.err.find("zero terminal SNR needs the ddim, euler"), std::string::npos) << pndm.err;
  CliRun word = cli(tiny({"--prompt", "a", "--steps", "2", "--zero-snr", "yes"}), dir);
  EXPECT_NE(word.err.find("--zero-snr expects on or off, got 'yes'"), std::string::npos) << word.err;
  CliRun phi = cli(tiny({"--prompt", "a", "--steps", "2", "--guidance-rescale", "2"}), dir);
  EXPECT_NE(phi.err.find("guidance rescale must lie in [0, 1]"), std::string::npos) << phi.err;
  // A zero-SNR model folder gets guidance rescale 0.7 unless the command line names one.
  const auto folder = test::tiny_sd_with_scheduler(
      "cli_zero_snr_model",
      R"({"_class_name": "EulerDiscreteScheduler", "beta_start": 0.00085, "beta_end": 0.012,
      "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "steps_offset": 1,
      "rescale_betas_zero_snr": true, "prediction_type": "v_prediction", "timestep_spacing": "trailing"})");
  for (const char* given : {"", "0"}) {
    std::vector<std::string> argv = {"generate", "--model", folder.string(), "--prompt", "a",
                                     "--steps",  "2",       "--json"};
    if (*given) argv.insert(argv.end(), {"--guidance-rescale", given});
    CliRun own = cli(argv, dir);
    ASSERT_EQ(own.code, 0) << own.err;
    const auto s = nlohmann::json::parse(own.out)["settings"];
    EXPECT_EQ(s["zero_snr"], true);
    EXPECT_EQ(s["guidance_rescale"], *given ? 0.0 : 0.7) << given;
    EXPECT_EQ(own.err.find("zero terminal SNR model: guidance rescale 0.7") != std::string::npos, !*given)
        << own.err;
  }
  CliRun unused =
      cli(tiny({"--prompt", "a", "--steps", "2", "--guidance", "1", "--guidance-rescale", "0.5"}), dir);
  ASSERT_EQ(unused.code, 0) << unused.err;
  EXPECT_NE(unused.out.find("guidance rescale: 0.5 (unused: no classifier-free guidance in this run)"),
            std::string::npos)
      << unused.out;  // (without --json the log goes to stdout)
}

// A few-step model's own steps and guidance when the command line names none (pipeline/few_step.h):
// tiny-lcm is LCM-distilled, so 4 steps at guidance 8, said on stdout; given values win; a standard
// model keeps 50 steps (checked on its metadata elsewhere: Cli.EightPrompts… uses --steps).
TEST(Cli, AFewStepModelGetsItsOwnStepsAndGuidanceUnlessGiven) {
  auto dir = test::temp_dir("cli_few_step_defaults");
  const std::string lcm = (test::data_dir() / "tiny-lcm").string();
  CliRun r = cli({"generate", "--model", lcm, "--prompt", "a red circle", "--out", "own.png"}, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("few-step model (LCM-distilled UNet, guidance embedded): 4 steps, guidance 8"),
            std::string::npos) << r.out;
  std::vector<PngText> texts;
  read_png(dir / "own.png", &texts);
  auto own = parse_png_metadata(texts);
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->steps, 4);
  EXPECT_EQ(own->guidance_scale, 8.0);
  EXPECT_EQ(own->scheduler, SchedulerKind::Lcm);

  r = cli({"generate", "--model", lcm, "--prompt", "a red circle", "--steps", "2", "--guidance", "3", "--out", "given.png"},
          dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  texts.clear();
  read_png(dir / "given.png", &texts);
  auto given = parse_png_metadata(texts);
  ASSERT_TRUE(given.has_value());
  EXPECT_EQ(given->steps, 2);
  EXPECT_EQ(given->guidance_scale, 3.0);

  r = cli(tiny({"--prompt", "a red circle", "--out", "standard.png"}), dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(r.out.find("few-step model"), std::string::npos) << r.out;
  texts.clear();
  read_png(dir / "standard.png", &texts);
  EXPECT_EQ(parse_png_metadata(texts)->steps, 50);
}
