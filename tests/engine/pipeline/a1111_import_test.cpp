// Another tool's A1111 parameters: what Octodiff cannot apply of them is said
// (ImageMetadata::not_applied) instead of dropped — a sigma schedule it lacks, a sampler it lacks
// (then the model's own scheduler, not PNDM), the hires fix, the torch noise — and its own images
// read back with nothing to say.
#include <gtest/gtest.h>

#include <algorithm>

#include "pipeline/metadata.h"

using namespace octodiff;

namespace {

ImageMetadata read_a1111(const std::string& settings) {
  const auto m = parse_png_metadata({{"parameters", "a castle on a hill\n" + settings}});
  EXPECT_TRUE(m.has_value()) << settings;
  return m.value_or(ImageMetadata{});
}

bool says(const ImageMetadata& m, const std::string& part) {
  const bool found = std::any_of(m.not_applied.begin(), m.not_applied.end(),
                                 [&](const std::string& n) { return n.find(part) != std::string::npos; });
  if (!found)
    for (const std::string& n : m.not_applied) std::printf("  [not applied] %s\n", n.c_str());
  return found;
}

}  // namespace

TEST(A1111Import, KarrasSamplersRunWithKarrasSigmas) {
  const ImageMetadata m =
      read_a1111("Steps: 20, Sampler: DPM++ 2M Karras, CFG scale: 7, Seed: 1, Size: 512x512");
  EXPECT_EQ(m.scheduler, SchedulerKind::DpmSolverPP);
  EXPECT_EQ(m.karras_sigmas, std::optional(true));
  EXPECT_FALSE(m.scheduler_unavailable);
  EXPECT_FALSE(says(m, "Karras"));
  const GenerationRequest r = request_from_metadata(m);
  EXPECT_EQ(r.scheduler, SchedulerKind::DpmSolverPP);
  EXPECT_EQ(r.karras_sigmas, std::optional(true));
  for (const char* name : {"Euler Karras", "LMS Karras"})
    EXPECT_EQ(read_a1111(std::string("Steps: 20, Sampler: ") + name + ", Seed: 1").karras_sigmas,
              std::optional(true))
        << name;
  // The plain name turns them off (A1111's meaning), whatever the model's configuration says.
  EXPECT_EQ(read_a1111("Steps: 20, Sampler: DPM++ 2M, Seed: 1").karras_sigmas, std::optional(false));
  // A1111 1.9+ writes the schedule as its own key.
  const ImageMetadata split =
      read_a1111("Steps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 1, Size: 512x512");
  EXPECT_EQ(split.scheduler, SchedulerKind::DpmSolverPP);
  EXPECT_EQ(split.karras_sigmas, std::optional(true));
  EXPECT_FALSE(says(split, "schedule type"));
  EXPECT_EQ(read_a1111("Steps: 20, Sampler: Euler, Schedule type: Uniform, Seed: 1").karras_sigmas,
            std::optional(false));
  EXPECT_FALSE(
      says(read_a1111("Steps: 20, Sampler: Euler a, Schedule type: Automatic, CFG scale: 7, Seed: 1, "
                      "Size: 512x512"),
           "schedule type"));
}

TEST(A1111Import, SchedulesThisPortLacksAreSaid) {
  // Euler ancestral has no Karras sigmas in diffusers; exponential sigmas are not implemented.
  const ImageMetadata a =
      read_a1111("Steps: 20, Sampler: Euler a Karras, CFG scale: 7, Seed: 1, Size: 512x512");
  EXPECT_EQ(a.scheduler, SchedulerKind::EulerAncestral);
  EXPECT_FALSE(a.karras_sigmas.has_value());
  EXPECT_TRUE(
      says(a, "the sampler 'Euler a Karras' runs as 'Euler a': the Karras schedule is not available here"));
  const ImageMetadata e = read_a1111("Steps: 20, Sampler: DPM++ 2M Exponential, Seed: 1");
  EXPECT_EQ(e.scheduler, SchedulerKind::DpmSolverPP);
  EXPECT_TRUE(says(e, "the Exponential schedule is not available here"));
  const ImageMetadata split = read_a1111("Steps: 20, Sampler: DPM++ 2M, Schedule type: Exponential, Seed: 1");
  EXPECT_TRUE(says(split, "the schedule type 'Exponential' is not available here"));
  EXPECT_TRUE(says(read_a1111("Steps: 20, Sampler: Euler a, Schedule type: Karras, Seed: 1"),
                   "the schedule type 'Karras' is not available here"));
}

TEST(A1111Import, AnUnknownSamplerLeavesTheSchedulerToTheModel) {
  const ImageMetadata m = read_a1111("Steps: 20, Sampler: UniPC, CFG scale: 7, Seed: 1, Size: 512x512");
  EXPECT_TRUE(m.scheduler_unavailable);
  EXPECT_TRUE(says(m, "the sampler 'UniPC' is not available here: the model's own scheduler runs"));
  EXPECT_FALSE(request_from_metadata(m).scheduler.has_value());  // not PNDM, the struct's default
}

TEST(A1111Import, HiresFixAndTorchNoiseAreSaid) {
  const ImageMetadata m = read_a1111(
      "Steps: 20, Sampler: Euler, CFG scale: 7, Seed: 1, Size: 512x512, Denoising strength: 0.5, Hires "
      "upscale: 2, "
      "Hires steps: 10, Hires upscaler: Latent");
  EXPECT_TRUE(says(m, "the hires fix (Hires upscale: 2) is not applied"));
  ASSERT_FALSE(m.not_applied.empty());
  EXPECT_NE(m.not_applied[0].find("the seed draws JAX's noise here, not the torch noise"), std::string::npos);
}

TEST(A1111Import, OctodiffsOwnTextHasNothingToSay) {
  const ImageMetadata m = read_a1111(
      "Steps: 4, Sampler: LCM, CFG scale: 8, Seed: 0, Size: 64x64, Model hash: 876e4afde5, "
      "Model: demo-model, RNG: JAX classic, Compat: flax, Clip skip: 2");
  EXPECT_TRUE(m.not_applied.empty());
  EXPECT_FALSE(m.scheduler_unavailable);
  EXPECT_EQ(m.scheduler, SchedulerKind::Lcm);
}

// Hostile text repeating keys gets each sentence once and at most eight of them.
TEST(A1111Import, NotesAreOnceAndAtMostEight) {
  std::string settings = "Steps: 20, Sampler: Euler, CFG scale: 7, Seed: 1, Size: 512x512";
  for (int i = 0; i < 1000; ++i) settings += ", Hires upscale: 2, Schedule type: S" + std::to_string(i);
  const ImageMetadata m = read_a1111(settings);
  EXPECT_EQ(m.not_applied.size(), 8u);
  EXPECT_EQ(std::count_if(m.not_applied.begin(), m.not_applied.end(),
                          [](const std::string& n) { return n.find("hires fix") != std::string::npos; }),
            1);
}
