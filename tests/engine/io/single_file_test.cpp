// Single-file (ldm) checkpoints: the tiny model's diffusers weights are written as one ldm-keyed
// file and read back. The expected ldm keys below are written out by hand from spec/models.md §6
// for the tiny layout (2 levels, 2 resnets per level: input blocks 1,2 = level 0, 3 = its
// downsampler, 4,5 = level 1; output blocks 0..2 = up level 0 with its upsampler at 2.1.conv,
// 3..5 = up level 1 with attention), not derived from the code under test.
#include "io/single_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "test_support.h"
#include "tiny_single_file.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using Family = SingleFileCheckpoint::Family;

using test::Component;
const Component& unet() {
  return test::tiny_unet_weights();
}
const Component& vae() {
  return test::tiny_vae_weights();
}
const Component& text() {
  return test::tiny_text_encoder_weights();
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) == 0;
}

// Every diffusers tensor is present under its name with identical values, and nothing else is
// left over (finish() passes).
void expect_component_equal(WeightSource& w, const Component& c, const std::string& label) {
  int mismatches = 0;
  for (const auto& [name, t] : c.tensors) {
    ASSERT_TRUE(w.has(name)) << label << ": missing " << name;
    if (!same(w.take(name, t.shape()), t)) {
      ++mismatches;
      ADD_FAILURE() << label << ": values differ for " << name;
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_NO_THROW(w.finish()) << label;
}

SingleFileContents tiny_contents(Family family) {
  return test::tiny_sd_single_file_contents(family);
}

// The stored (ldm-keyed) tensor of a written file.
Tensor stored(const SafetensorsFile& f, const std::string& name) {
  return f.to_f32(name);
}

void expect_stored_equals(const SafetensorsFile& f, const std::string& ldm, const Component& c,
                          const std::string& diffusers) {
  const TensorRecord* rec = f.find(ldm);
  ASSERT_NE(rec, nullptr) << "file lacks " << ldm;
  const Tensor& want = c.tensors.at(diffusers);
  Tensor got = stored(f, ldm);
  ASSERT_EQ(got.numel(), want.numel()) << ldm;
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.numel()))
      << ldm << " vs " << diffusers;
}

void write_raw(const fs::path& path, const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& n : names) tensors.push_back({n, Tensor::full({2, 2}, 1.0f)});
  write_safetensors_f32(path, tensors);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SingleFile, Sd1RoundTripKeepsEveryTensor) {
  const fs::path path = test::temp_dir("single_file_sd1") / "tiny.safetensors";
  write_single_file(path, tiny_contents(Family::SD1), DType::F32);

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->tensors().size(), unet().tensors.size() + vae().tensors.size() + text().tensors.size());

  // Hand-derived ldm keys (spec §6) for the tiny layout.
  const Component& u = unet();
  const std::string m = "model.diffusion_model.";
  expect_stored_equals(*f, m + "time_embed.0.weight", u, "time_embedding.linear_1.weight");
  expect_stored_equals(*f, m + "time_embed.2.bias", u, "time_embedding.linear_2.bias");
  expect_stored_equals(*f, m + "input_blocks.0.0.weight", u, "conv_in.weight");
  expect_stored_equals(*f, m + "input_blocks.1.0.in_layers.0.weight", u,
                       "down_blocks.0.resnets.0.norm1.weight");
  expect_stored_equals(*f, m + "input_blocks.1.0.emb_layers.1.weight", u,
                       "down_blocks.0.resnets.0.time_emb_proj.weight");
  expect_stored_equals(*f, m + "input_blocks.2.0.out_layers.3.weight", u,
                       "down_blocks.0.resnets.1.conv2.weight");
  expect_stored_equals(*f, m + "input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight", u,
                       "down_blocks.0.attentions.1.transformer_blocks.0.attn2.to_k.weight");
  expect_stored_equals(*f, m + "input_blocks.3.0.op.weight", u, "down_blocks.0.downsamplers.0.conv.weight");
  expect_stored_equals(*f, m + "input_blocks.4.0.skip_connection.weight", u,
                       "down_blocks.1.resnets.0.conv_shortcut.weight");
  expect_stored_equals(*f, m + "input_blocks.5.0.in_layers.2.weight", u,
                       "down_blocks.1.resnets.1.conv1.weight");
  expect_stored_equals(*f, m + "middle_block.0.out_layers.0.bias", u, "mid_block.resnets.0.norm2.bias");
  expect_stored_equals(*f, m + "middle_block.1.proj_in.weight", u, "mid_block.attentions.0.proj_in.weight");
  expect_stored_equals(*f, m + "middle_block.2.in_layers.0.bias", u, "mid_block.resnets.1.norm1.bias");
  expect_stored_equals(*f, m + "output_blocks.0.0.skip_connection.weight", u,
                       "up_blocks.0.resnets.0.conv_shortcut.weight");
  expect_stored_equals(*f, m + "output_blocks.2.1.conv.weight", u, "up_blocks.0.upsamplers.0.conv.weight");
  expect_stored_equals(*f, m + "output_blocks.3.0.in_layers.2.weight", u,
                       "up_blocks.1.resnets.0.conv1.weight");
  expect_stored_equals(*f, m + "output_blocks.5.1.proj_out.weight", u,
                       "up_blocks.1.attentions.2.proj_out.weight");
  expect_stored_equals(*f, m + "output_blocks.5.1.transformer_blocks.0.ff.net.0.proj.weight", u,
                       "up_blocks.1.attentions.2.transformer_blocks.0.ff.net.0.proj.weight");
  expect_stored_equals(*f, m + "out.0.weight", u, "conv_norm_out.weight");
  expect_stored_equals(*f, m + "out.2.weight", u, "conv_out.weight");

  const Component& v = vae();
  const std::string fs_ = "first_stage_model.";
  expect_stored_equals(*f, fs_ + "encoder.conv_in.weight", v, "encoder.conv_in.weight");
  expect_stored_equals(*f, fs_ + "encoder.down.0.block.1.conv2.weight", v,
                       "encoder.down_blocks.0.resnets.1.conv2.weight");
  expect_stored_equals(*f, fs_ + "encoder.down.0.downsample.conv.weight", v,
                       "encoder.down_blocks.0.downsamplers.0.conv.weight");
  expect_stored_equals(*f, fs_ + "encoder.down.1.block.0.nin_shortcut.weight", v,
                       "encoder.down_blocks.1.resnets.0.conv_shortcut.weight");
  expect_stored_equals(*f, fs_ + "encoder.mid.block_1.norm1.weight", v,
                       "encoder.mid_block.resnets.0.norm1.weight");
  expect_stored_equals(*f, fs_ + "encoder.mid.attn_1.norm.weight", v,
                       "encoder.mid_block.attentions.0.group_norm.weight");
  expect_stored_equals(*f, fs_ + "encoder.mid.attn_1.q.weight", v,
                       "encoder.mid_block.attentions.0.to_q.weight");
  expect_stored_equals(*f, fs_ + "encoder.mid.attn_1.proj_out.bias", v,
                       "encoder.mid_block.attentions.0.to_out.0.bias");
  expect_stored_equals(*f, fs_ + "encoder.norm_out.weight", v, "encoder.conv_norm_out.weight");
  expect_stored_equals(*f, fs_ + "quant_conv.weight", v, "quant_conv.weight");
  // Reversed decoder levels: ldm up.1 is the first (lowest resolution) diffusers up block.
  expect_stored_equals(*f, fs_ + "decoder.up.1.block.2.conv1.weight", v,
                       "decoder.up_blocks.0.resnets.2.conv1.weight");
  expect_stored_equals(*f, fs_ + "decoder.up.1.upsample.conv.weight", v,
                       "decoder.up_blocks.0.upsamplers.0.conv.weight");
  expect_stored_equals(*f, fs_ + "decoder.up.0.block.0.nin_shortcut.weight", v,
                       "decoder.up_blocks.1.resnets.0.conv_shortcut.weight");
  expect_stored_equals(*f, fs_ + "decoder.mid.block_2.conv1.bias", v,
                       "decoder.mid_block.resnets.1.conv1.bias");
  expect_stored_equals(*f, fs_ + "decoder.norm_out.bias", v, "decoder.conv_norm_out.bias");
  const TensorRecord* q = f->find(fs_ + "decoder.mid.attn_1.k.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(shape_str(q->shape), "(64, 64, 1, 1)") << "VAE attention is stored as 1x1 convs";

  expect_stored_equals(*f, "cond_stage_model.transformer.text_model.encoder.layers.3.self_attn.k_proj.bias",
                       text(), "text_model.encoder.layers.3.self_attn.k_proj.bias");

  SingleFileCheckpoint ck = open_single_file(path);
  EXPECT_EQ(ck.family, Family::SD1);
  EXPECT_FALSE(ck.v_prediction);
  EXPECT_EQ(ck.unet_in_channels, 4);
  EXPECT_EQ(ck.cross_attention_dim, 32);
  EXPECT_FALSE(ck.has_ema);
  EXPECT_TRUE(ck.unrecognized.empty());
  ASSERT_TRUE(ck.unet && ck.vae && ck.text_encoder);
  EXPECT_EQ(ck.unet->names().size(), u.tensors.size());
  expect_component_equal(*ck.unet, u, "unet");
  expect_component_equal(*ck.vae, v, "vae");
  expect_component_equal(*ck.text_encoder, text(), "text encoder");
}

TEST(SingleFile, HalfPrecisionStorageRoundsOnce) {
  const fs::path path = test::temp_dir("single_file_f16") / "tiny.safetensors";
  write_single_file(path, tiny_contents(Family::SD1), DType::F16);
  SingleFileCheckpoint ck = open_single_file(path);
  ASSERT_EQ(SafetensorsFile::open(path)->find("model.diffusion_model.out.2.weight")->dtype, DType::F16);
  double worst = 0;
  for (const auto& [name, t] : vae().tensors) {
    Tensor got = ck.vae->take(name, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i)
      worst = std::max(worst, std::fabs(got[i] - t[i]) / std::max(1e-3, std::fabs(double{t[i]})));
  }
  std::printf("[f16 storage] max relative error %.3e\n", worst);
  EXPECT_LE(worst, 1.0 / 1024);  // half of an f16 ulp is 2^-11 relative; subnormals bounded by 1e-3 floor
}

TEST(SingleFile, Sd2OpenClipFusesAndSplitsQkv) {
  const fs::path dir = test::temp_dir("single_file_sd2");
  const fs::path path = dir / "tiny-sd2.safetensors";
  write_single_file(path, tiny_contents(Family::SD2), DType::F32);

  auto f = SafetensorsFile::open(path);
  const std::string p = "cond_stage_model.model.";
  const Component& t = text();
  // in_proj = [q; k; v] rows.
  const Tensor in_w = f->to_f32(p + "transformer.resblocks.2.attn.in_proj_weight");
  ASSERT_EQ(shape_str(in_w.shape()), "(96, 32)");
  const char* parts[] = {"q_proj", "k_proj", "v_proj"};
  for (int k = 0; k < 3; ++k) {
    const Tensor& w =
        t.tensors.at(std::string("text_model.encoder.layers.2.self_attn.") + parts[k] + ".weight");
    EXPECT_EQ(0, std::memcmp(in_w.data() + k * 32 * 32, w.data(), sizeof(float) * 32 * 32)) << parts[k];
    const Tensor& b =
        t.tensors.at(std::string("text_model.encoder.layers.2.self_attn.") + parts[k] + ".bias");
    Tensor in_b = f->to_f32(p + "transformer.resblocks.2.attn.in_proj_bias");
    EXPECT_EQ(0, std::memcmp(in_b.data() + k * 32, b.data(), sizeof(float) * 32)) << parts[k];
  }
  expect_stored_equals(*f, p + "transformer.resblocks.4.attn.out_proj.weight", t,
                       "text_model.encoder.layers.4.self_attn.out_proj.weight");
  expect_stored_equals(*f, p + "transformer.resblocks.0.ln_1.weight", t,
                       "text_model.encoder.layers.0.layer_norm1.weight");
  expect_stored_equals(*f, p + "transformer.resblocks.1.ln_2.bias", t,
                       "text_model.encoder.layers.1.layer_norm2.bias");
  expect_stored_equals(*f, p + "transformer.resblocks.3.mlp.c_fc.weight", t,
                       "text_model.encoder.layers.3.mlp.fc1.weight");
  expect_stored_equals(*f, p + "transformer.resblocks.3.mlp.c_proj.bias", t,
                       "text_model.encoder.layers.3.mlp.fc2.bias");
  expect_stored_equals(*f, p + "token_embedding.weight", t, "text_model.embeddings.token_embedding.weight");
  expect_stored_equals(*f, p + "positional_embedding", t, "text_model.embeddings.position_embedding.weight");
  expect_stored_equals(*f, p + "ln_final.weight", t, "text_model.final_layer_norm.weight");
  // Like a real SD2 file: one more block than the diffusers model uses, and the projection head.
  EXPECT_NE(f->find(p + "transformer.resblocks.5.attn.in_proj_weight"), nullptr);
  EXPECT_EQ(f->find(p + "transformer.resblocks.6.attn.in_proj_weight"), nullptr);
  EXPECT_NE(f->find(p + "text_projection"), nullptr);

  SingleFileCheckpoint ck = open_single_file(path);
  EXPECT_EQ(ck.family, Family::SD2);
  EXPECT_TRUE(ck.v_prediction) << "SD2 without global_step is taken as a v-prediction model";
  EXPECT_FALSE(ck.global_step.has_value());
  expect_component_equal(*ck.text_encoder, t, "openclip text encoder");
  EXPECT_FALSE(ck.text_encoder->has("text_model.encoder.layers.5.self_attn.q_proj.weight"))
      << "the last OpenCLIP block is dropped";
  expect_component_equal(*ck.unet, unet(), "unet");

  // global_step 875000 marks the 512-pixel 2-base model: epsilon prediction.
  SingleFileContents base = tiny_contents(Family::SD2);
  base.extra.push_back({"global_step", DType::I64, {}, [](uint8_t* dst, size_t) {
                          int64_t step = 875000;
                          std::memcpy(dst, &step, 8);
                        }});
  write_single_file(dir / "tiny-sd2-base.safetensors", base, DType::F32);
  SingleFileCheckpoint ck_base = open_single_file(dir / "tiny-sd2-base.safetensors");
  EXPECT_EQ(ck_base.global_step.value_or(-1), 875000);
  EXPECT_FALSE(ck_base.v_prediction);
}

TEST(SingleFile, EmaWeightsAreUsedOnlyWhenAsked) {
  SingleFileContents contents = tiny_contents(Family::SD1);
  std::vector<NamedShape> shapes;
  for (const auto& d : contents.unet) shapes.push_back({d.name, d.shape});
  // EMA copies hold the regular values + 1.
  for (const LdmTensorPlan& plan : plan_ldm_tensors(LdmComponent::UNet, shapes)) {
    ASSERT_EQ(plan.sources.size(), 1u);
    const Tensor* t = &unet().tensors.at(plan.sources[0]);
    contents.extra.push_back({ldm_ema_name(plan.name), DType::F32, plan.shape, [t](uint8_t* dst, size_t) {
                                float* out = reinterpret_cast<float*>(dst);
                                for (int64_t i = 0; i < t->numel(); ++i) out[i] = (*t)[i] + 1.0f;
                              }});
  }
  EXPECT_EQ(ldm_ema_name("model.diffusion_model.input_blocks.0.0.weight"),
            "model_ema.diffusion_modelinput_blocks00weight");
  for (const char* n : {"model_ema.decay", "model_ema.num_updates"})
    contents.extra.push_back({n, DType::F32, {}, [](uint8_t* dst, size_t) { std::memset(dst, 0, 4); }});
  const fs::path path = test::temp_dir("single_file_ema") / "tiny-ema.safetensors";
  write_single_file(path, contents, DType::F32);

  SingleFileCheckpoint regular = open_single_file(path, /*use_ema=*/false);
  EXPECT_TRUE(regular.has_ema);
  EXPECT_FALSE(regular.used_ema);
  expect_component_equal(*regular.unet, unet(), "unet without EMA");

  SingleFileCheckpoint ema = open_single_file(path, /*use_ema=*/true);
  EXPECT_TRUE(ema.has_ema);
  EXPECT_TRUE(ema.used_ema);
  EXPECT_TRUE(ema.unrecognized.empty());
  int differing = 0;
  for (const auto& [name, t] : unet().tensors) {
    Tensor got = ema.unet->take(name, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) differing += got[i] != t[i] + 1.0f;
  }
  EXPECT_EQ(differing, 0);
  EXPECT_NO_THROW(ema.unet->finish());

  // A file without EMA weights: the request falls back to the regular weights.
  const fs::path plain = test::temp_dir("single_file_no_ema") / "tiny.safetensors";
  write_single_file(plain, tiny_contents(Family::SD1), DType::F32);
  SingleFileCheckpoint fallback = open_single_file(plain, /*use_ema=*/true);
  EXPECT_FALSE(fallback.has_ema);
  EXPECT_FALSE(fallback.used_ema);
}

TEST(SingleFile, TrainingStateIsIgnoredAndStrayKeysReported) {
  SingleFileContents contents = tiny_contents(Family::SD1);
  for (const char* n : {"betas", "alphas_cumprod", "alphas_cumprod_prev"})
    contents.extra.push_back({n, DType::F32, {1000}, nullptr});
  contents.extra.push_back(
      {"cond_stage_model.transformer.text_model.embeddings.position_ids", DType::I64, {1, 77}, nullptr});
  contents.extra.push_back({"lora_te_something.alpha", DType::F32, {}, nullptr});
  const fs::path path = test::temp_dir("single_file_extras") / "tiny.safetensors";
  write_single_file(path, contents, DType::F32);
  SingleFileCheckpoint ck = open_single_file(path);
  ASSERT_EQ(ck.unrecognized.size(), 1u);
  EXPECT_EQ(ck.unrecognized[0], "lora_te_something.alpha");
  expect_component_equal(*ck.text_encoder, text(), "text encoder with position_ids");
}

TEST(SingleFile, OldStyleVaeAttentionNamesAreWrittenLikeNewOnes) {
  std::vector<NamedShape> names = {{"encoder.mid_block.attentions.0.query.weight", {8, 8}},
                                   {"encoder.mid_block.attentions.0.proj_attn.bias", {8}},
                                   {"decoder.mid_block.attentions.0.value.weight", {8, 8}}};
  auto plans = plan_ldm_tensors(LdmComponent::Vae, names);
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].name, "first_stage_model.encoder.mid.attn_1.q.weight");
  EXPECT_EQ(shape_str(plans[0].shape), "(8, 8, 1, 1)");
  EXPECT_EQ(plans[1].name, "first_stage_model.encoder.mid.attn_1.proj_out.bias");
  EXPECT_EQ(plans[2].name, "first_stage_model.decoder.mid.attn_1.v.weight");
}

TEST(SingleFile, UnknownTensorsUnderAComponentAreReportedByFinish) {
  SingleFileContents contents = tiny_contents(Family::SD1);
  contents.extra.push_back({"model.diffusion_model.input_blocks.1.0.bogus.weight", DType::F32, {3}, nullptr});
  const fs::path path = test::temp_dir("single_file_bogus") / "tiny.safetensors";
  write_single_file(path, contents, DType::F32);
  SingleFileCheckpoint ck = open_single_file(path);
  for (const auto& [name, t] : unet().tensors) ck.unet->take(name, t.shape());
  std::string msg = error_of([&] { ck.unet->finish(); });
  EXPECT_NE(msg.find("model.diffusion_model.input_blocks.1.0.bogus.weight"), std::string::npos) << msg;
}

// LCM-distilled UNets have no ldm name for time_embedding.cond_proj (diffusers 0.31's
// single_file_utils and convert scripts map none), so a single file carrying one under a guessed
// name is reported by the tensor's own name, never dropped: without it the model is another one.
TEST(SingleFile, AnLcmCondProjInAnLdmFileIsReportedNotDropped) {
  SingleFileContents contents = tiny_contents(Family::SD1);
  contents.extra.push_back({"model.diffusion_model.time_embed.cond_proj.weight", DType::F32, {32, 256}, nullptr});
  const fs::path path = test::temp_dir("single_file_lcm") / "tiny.safetensors";
  write_single_file(path, contents, DType::F32);
  SingleFileCheckpoint ck = open_single_file(path);
  for (const auto& [name, t] : unet().tensors) ck.unet->take(name, t.shape());
  std::string msg = error_of([&] { ck.unet->finish(); });
  EXPECT_NE(msg.find("model.diffusion_model.time_embed.cond_proj.weight"), std::string::npos) << msg;
}

TEST(SingleFile, ForeignFilesAreRefusedClearly) {
  const fs::path dir = test::temp_dir("single_file_errors");

  write_raw(dir / "random.safetensors", {"foo.weight", "bar.bias"});
  std::string msg = error_of([&] { open_single_file(dir / "random.safetensors"); });
  std::printf("[error] %s\n", msg.c_str());
  EXPECT_NE(msg.find("not a Stable Diffusion 1.x/2.x single-file checkpoint"), std::string::npos) << msg;
  EXPECT_NE(msg.find("foo.weight"), std::string::npos) << msg;

  write_raw(dir / "sdxl.safetensors",
            {"conditioner.embedders.0.transformer.text_model.final_layer_norm.weight",
             "model.diffusion_model.label_emb.0.0.weight", "model.diffusion_model.input_blocks.0.0.weight"});
  msg = error_of([&] { open_single_file(dir / "sdxl.safetensors"); });
  std::printf("[error] %s\n", msg.c_str());
  EXPECT_NE(msg.find("Stable Diffusion XL"), std::string::npos) << msg;

  msg = error_of(
      [&] { open_single_file(test::tiny_sd_dir() / "unet" / "diffusion_pytorch_model.safetensors"); });
  std::printf("[error] %s\n", msg.c_str());
  EXPECT_NE(msg.find("diffusers UNet"), std::string::npos) << msg;

  write_raw(dir / "odd_unet.safetensors", {"model.diffusion_model.joint_blocks.0.x.weight"});
  msg = error_of([&] { open_single_file(dir / "odd_unet.safetensors"); });
  std::printf("[error] %s\n", msg.c_str());
  EXPECT_NE(msg.find("no input_blocks/output_blocks"), std::string::npos) << msg;

  write_raw(
      dir / "odd_blocks.safetensors",
      {"model.diffusion_model.input_blocks.0.0.weight", "model.diffusion_model.input_blocks.1.0.x.weight",
       "model.diffusion_model.input_blocks.2.0.op.weight", "model.diffusion_model.input_blocks.7.0.x.weight",
       "model.diffusion_model.output_blocks.0.0.x.weight"});
  msg = error_of([&] { open_single_file(dir / "odd_blocks.safetensors"); });
  std::printf("[error] %s\n", msg.c_str());
  EXPECT_NE(msg.find("unrecognised UNet block structure"), std::string::npos) << msg;

  {
    std::ofstream garbage(dir / "garbage.safetensors", std::ios::binary);
    garbage << "this is not a safetensors file at all, just text";
  }
  msg = error_of([&] { open_single_file(dir / "garbage.safetensors"); });
  std::printf("[error] %s\n", msg.c_str());
  EXPECT_NE(msg, "(no error)");

  msg = error_of([&] {
    plan_ldm_tensors(LdmComponent::UNet, {{"down_blocks.0.resnets.0.norm1.weight", {4}},
                                          {"up_blocks.0.resnets.0.norm1.weight", {4}},
                                          {"lora_up.weight", {4}}});
  });
  EXPECT_NE(msg.find("lora_up.weight"), std::string::npos) << msg;
}

// The v_pred and ztsnr marker tensors (ComfyUI's, Forge's and kohya's convention): an SD 1.x file
// with v_pred is v-prediction, with ztsnr zero terminal SNR; the markers are no unrecognised
// tensors; without them nothing changes.
TEST(SingleFile, VPredAndZtsnrMarkersAreRead) {
  const fs::path dir = test::temp_dir("single_file_markers");
  const auto marker = [](const char* name) {
    return TensorToWrite{name, DType::F32, {0}, [](uint8_t*, size_t) {}};
  };
  SingleFileContents marked = tiny_contents(Family::SD1);
  marked.extra = {marker("v_pred"), marker("ztsnr")};
  write_single_file(dir / "vpred-ztsnr.safetensors", marked, DType::F32);
  const SingleFileCheckpoint ck = open_single_file(dir / "vpred-ztsnr.safetensors");
  EXPECT_EQ(ck.family, Family::SD1);
  EXPECT_TRUE(ck.v_prediction);
  EXPECT_TRUE(ck.zero_snr);
  EXPECT_TRUE(ck.unrecognized.empty());
  SingleFileContents v_only = tiny_contents(Family::SD1);
  v_only.extra = {marker("v_pred")};
  write_single_file(dir / "vpred.safetensors", v_only, DType::F32);
  const SingleFileCheckpoint v = open_single_file(dir / "vpred.safetensors");
  EXPECT_TRUE(v.v_prediction);
  EXPECT_FALSE(v.zero_snr);
  write_single_file(dir / "plain.safetensors", tiny_contents(Family::SD1), DType::F32);
  const SingleFileCheckpoint plain = open_single_file(dir / "plain.safetensors");
  EXPECT_FALSE(plain.v_prediction);
  EXPECT_FALSE(plain.zero_snr);
}
