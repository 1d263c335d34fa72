// Full-size SD 1.5 with synthetic weights (the make-random-model recipe: parameter catalogs +
// synthetic_parameter_values), written in both layouts to a temporary folder (deleted after):
//   - every tensor loaded from the single file equals the one from the diffusers folder;
//   - the full-size UNet loads and one forward at 64×64 latents, batch 2, is finite;
//   - a 16-step guided DDIM loop at 16×16 latents with the random text encoder and VAE stays
//     finite and bounded (the synthetic init is meant for benchmarks of whole generations).
// Slow: several GB of I/O and full-size UNet evaluations. Times are printed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "io/single_file.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/parameter_catalog.h"
#include "models/unet_2d_condition.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<DiffusersTensor> synthetic(const std::vector<ParameterSpec>& specs, uint64_t seed) {
  std::vector<DiffusersTensor> out;
  for (const auto& s : specs)
    out.push_back({s.name, s.shape, [s, seed](float* dst) { synthetic_parameter_values(s, seed, dst); }});
  return out;
}

void write_diffusers(const fs::path& path, const std::vector<DiffusersTensor>& tensors, DType dtype) {
  std::vector<TensorToWrite> list;
  for (const auto& t : tensors)
    list.push_back({t.name, dtype, t.shape, [&t, dtype](uint8_t* dst, size_t) {
                      std::vector<float> v(shape_numel(t.shape));
                      t.values(v.data());
                      store_floats(v.data(), static_cast<int64_t>(v.size()), dtype, dst);
                    }});
  write_safetensors(path, list);
}

struct Stats {
  double max_abs = 0, rms = 0;
  bool finite = true;
};
Stats stats(const Tensor& t) {
  Stats s;
  double sq = 0;
  for (float v : t) {
    s.finite = s.finite && std::isfinite(v);
    s.max_abs = std::max(s.max_abs, std::fabs(double{v}));
    sq += double{v} * v;
  }
  s.rms = std::sqrt(sq / std::max<int64_t>(1, t.numel()));
  return s;
}

Tensor gaussian(Shape shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  synthetic_values("noise", shape, seed, t.data());
  const float unit = std::sqrt(static_cast<float>(t.numel() / shape[0]));  // undo the 1/sqrt(fan_in)
  for (float& v : t) v *= unit;
  return t;
}

struct TempDir {
  fs::path path;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST(FullSizeSlow, Sd15BothLayoutsAgreeAndRunFinite) {
  TempDir dir{test::temp_dir("full_size_sd15")};
  const ClipTextConfig tc = ClipTextConfig::sd1();
  const UNetConfig uc = UNetConfig::sd1();
  const VaeConfig vc = VaeConfig::sd();
  SingleFileContents contents;
  contents.family = SingleFileCheckpoint::Family::SD1;
  contents.unet = synthetic(unet_parameters(uc), 1);
  contents.vae = synthetic(vae_parameters(vc), 2);
  contents.text_encoder = synthetic(clip_text_parameters(tc), 3);

  auto t0 = Clock::now();
  write_single_file(dir.path / "model.safetensors", contents, DType::F16);
  const double t_single = seconds_since(t0);
  t0 = Clock::now();
  write_diffusers(dir.path / "unet.safetensors", contents.unet, DType::F16);
  write_diffusers(dir.path / "vae.safetensors", contents.vae, DType::F16);
  write_diffusers(dir.path / "text.safetensors", contents.text_encoder, DType::F16);
  std::printf("[time] wrote single file (%.2f GB) in %.1f s, diffusers files in %.1f s\n",
              fs::file_size(dir.path / "model.safetensors") / 1e9, t_single, seconds_since(t0));

  // Every tensor agrees between the layouts.
  t0 = Clock::now();
  SingleFileCheckpoint ck = open_single_file(dir.path / "model.safetensors");
  EXPECT_EQ(ck.family, SingleFileCheckpoint::Family::SD1);
  EXPECT_EQ(ck.cross_attention_dim, 768);
  EXPECT_FALSE(ck.v_prediction);
  struct Pair {
    const char* label;
    std::shared_ptr<WeightSource> single;
    fs::path folder_file;
    const std::vector<DiffusersTensor>* tensors;
  };
  for (const Pair& p :
       {Pair{"unet", ck.unet, dir.path / "unet.safetensors", &contents.unet},
        Pair{"vae", ck.vae, dir.path / "vae.safetensors", &contents.vae},
        Pair{"text encoder", ck.text_encoder, dir.path / "text.safetensors", &contents.text_encoder}}) {
    auto folder = weights_from_safetensors({p.folder_file}, p.label);
    int differing = 0;
    for (const auto& t : *p.tensors) {
      Tensor a = p.single->take(t.name, t.shape), b = folder->take(t.name, t.shape);
      differing += std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) != 0;
    }
    EXPECT_EQ(differing, 0) << p.label;
    EXPECT_NO_THROW(p.single->finish()) << p.label;
    std::printf("[layouts] %-12s %zu tensors compared, %d differ\n", p.label, p.tensors->size(), differing);
  }
  std::printf("[time] compared layouts in %.1f s\n", seconds_since(t0));

  // Full-size models from the single file.
  t0 = Clock::now();
  SingleFileCheckpoint fresh = open_single_file(dir.path / "model.safetensors");
  UNet2DCondition unet = UNet2DCondition::load(*fresh.unet, uc);
  ClipTextModel text = ClipTextModel::load(*fresh.text_encoder, tc);
  AutoencoderKL vae = AutoencoderKL::load(*fresh.vae, vc, /*with_encoder=*/false);
  std::printf("[time] loaded UNet, text encoder, VAE decoder in %.1f s\n", seconds_since(t0));

  // Text: uncond = bos, eos, pad…; cond = bos, a few ids, eos, pad… (ids < 1000 like the tiny
  // tokenizer the random models ship; 49406/49407 are CLIP's bos/eos rows).
  std::vector<int32_t> ids(2 * 77, 49407);
  ids[0] = ids[77] = 49406;
  for (int i = 1; i <= 6; ++i) ids[77 + i] = 100 * i + 7;
  Tensor context = text.forward(ids, 2, 77).last_hidden_state;
  Stats cs = stats(context);
  EXPECT_TRUE(cs.finite);
  std::printf("[text] context rms %.3f max %.3f\n", cs.rms, cs.max_abs);

  const Numerics num{Flavour::Diffusers};
  t0 = Clock::now();
  Tensor out = unet.forward(gaussian({2, 4, 64, 64}, 9), {999.0, 999.0}, context, num);
  Stats os = stats(out);
  std::printf("[time] UNet forward 2x4x64x64 in %.1f s; output rms %.3f max %.3f\n", seconds_since(t0),
              os.rms, os.max_abs);
  EXPECT_TRUE(os.finite);
  EXPECT_EQ(shape_str(out.shape()), "(2, 4, 64, 64)");

  // 16 DDIM steps (eta 0, epsilon prediction) with classifier-free guidance 7.5 at 16×16 (every level
  // still runs: 16 → 8 → 4 → 2).
  std::vector<double> alphas_cumprod(1000);
  double ac = 1.0;
  for (int i = 0; i < 1000; ++i) {
    const double b = std::pow(std::sqrt(0.00085) + (std::sqrt(0.012) - std::sqrt(0.00085)) * i / 999.0, 2.0);
    alphas_cumprod[i] = ac *= 1.0 - b;
  }
  const int steps = 16, h = 16;
  Tensor x = gaussian({1, 4, h, h}, 10);
  t0 = Clock::now();
  double worst_latent = 0;
  for (int s = 0; s < steps; ++s) {
    const int t = 999 - s * (1000 / steps), t_prev = t - 1000 / steps;
    Tensor both = Tensor::empty({2, 4, h, h});
    std::memcpy(both.data(), x.data(), sizeof(float) * x.numel());
    std::memcpy(both.data() + x.numel(), x.data(), sizeof(float) * x.numel());
    Tensor eps2 = unet.forward(both, {double(t), double(t)}, context, num);
    const double a = alphas_cumprod[t], a_prev = t_prev >= 0 ? alphas_cumprod[t_prev] : 1.0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double e = eps2[i] + 7.5 * (eps2[x.numel() + i] - eps2[i]);
      const double x0 = (x[i] - std::sqrt(1 - a) * e) / std::sqrt(a);
      x[i] = static_cast<float>(std::sqrt(a_prev) * x0 + std::sqrt(1 - a_prev) * e);
    }
    Stats xs = stats(x);
    worst_latent = std::max(worst_latent, xs.max_abs);
    ASSERT_TRUE(xs.finite) << "latents not finite after step " << s;
  }
  std::printf("[time] %d guided UNet steps at 2x4x%dx%d in %.1f s; max |latent| over the run %.3g\n", steps,
              h, h, seconds_since(t0), worst_latent);
  EXPECT_LT(worst_latent, 1e4);

  t0 = Clock::now();
  for (float& v : x) v /= 0.18215f;
  Tensor image = vae.decode(x);
  Stats is = stats(image);
  std::printf("[time] VAE decode to %s in %.1f s; rms %.3f max %.3f\n", shape_str(image.shape()).c_str(),
              seconds_since(t0), is.rms, is.max_abs);
  EXPECT_TRUE(is.finite);
}
