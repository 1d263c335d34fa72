// Reading LoRA files (io/lora.h): formats, the key mapping to diffusers parameter names (kohya,
// kohya LDM-named, PEFT, diffusers' attention processors), alpha/rank, and every refusal with the
// file and the tensor named. The targets are the tiny model's own tensors (tests/data/tiny-sd).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "io/lora.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

const LoraKeyMap& tiny_keys() {
  static const LoraKeyMap keys(LoraTargets{
      test::tensor_shapes_of(test::tiny_sd_dir() / "unet" / "diffusion_pytorch_model.safetensors"),
      test::tensor_shapes_of(test::tiny_sd_dir() / "text_encoder" / "model.safetensors")});
  return keys;
}

fs::path lora_file(const std::string& name) { return test::data_dir() / "tiny-sd-lora" / (name + ".safetensors"); }

const LoraPair* find(const LoraFile& f, const std::string& parameter) {
  for (const auto& p : f.pairs)
    if (p.target.parameter == parameter) return &p;
  return nullptr;
}

Tensor filled(Shape shape, float v) { return Tensor::full(std::move(shape), v); }

// Writes a small file and returns the error reading it gives ("(no error)" when it reads).
std::string read_error(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const fs::path p = test::temp_dir("lora_io") / (name + ".safetensors");
  write_safetensors_f32(p, tensors);
  try {
    read_lora(p, tiny_keys());
  } catch (const Error& e) {
    std::printf("%s: %s\n", name.c_str(), e.what());
    EXPECT_NE(std::string(e.what()).find(p.filename().string()), std::string::npos) << "names the file";
    return e.what();
  }
  return "(no error)";
}

const std::string kQ = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";

}  // namespace

TEST(LoraRead, KohyaMapsModulesAndScalesByAlphaOverRank) {
  const LoraFile f = read_lora(lora_file("kohya"), tiny_keys());
  EXPECT_EQ(f.format, "kohya");
  EXPECT_EQ(f.pairs.size(), 15u);
  const LoraPair* conv = find(f, "down_blocks.0.resnets.0.conv1.weight");
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->target.component, LoraComponent::UNet);
  EXPECT_EQ(conv->down.shape(), (Shape{4, 32 * 3 * 3}));  // (rank, in·kh·kw)
  EXPECT_EQ(conv->up.shape(), (Shape{32, 4}));
  EXPECT_FLOAT_EQ(conv->scale, 2.0f / 4.0f);
  const LoraPair* te = find(f, "text_model.encoder.layers.1.mlp.fc1.weight");
  ASSERT_TRUE(te);
  EXPECT_EQ(te->target.component, LoraComponent::TextEncoder);
  EXPECT_EQ(te->origin, "lora_te_text_model_encoder_layers_1_mlp_fc1.lora_down.weight");
}

TEST(LoraRead, KohyaLdmNamesGoThroughTheSingleFileMapping) {
  const LoraFile f = read_lora(lora_file("kohya_ldm"), tiny_keys());
  EXPECT_EQ(f.format, "kohya + kohya (LDM names)");
  const std::pair<const char*, const char*> expected[] = {
      {"down_blocks.0.resnets.0.conv1.weight", "lora_unet_input_blocks_1_0_in_layers_2.lora_down.weight"},
      {"down_blocks.1.resnets.0.time_emb_proj.weight", "lora_unet_input_blocks_4_0_emb_layers_1.lora_down.weight"},
      {"mid_block.resnets.1.conv2.weight", "lora_unet_middle_block_2_out_layers_3.lora_down.weight"},
      {"up_blocks.0.resnets.1.conv_shortcut.weight", "lora_unet_output_blocks_1_0_skip_connection.lora_down.weight"},
      {"up_blocks.1.attentions.1.proj_out.weight", "lora_unet_output_blocks_4_1_proj_out.lora_down.weight"},
  };
  for (const auto& [parameter, origin] : expected) {
    const LoraPair* p = find(f, parameter);
    ASSERT_TRUE(p) << parameter;
    EXPECT_EQ(p->origin, origin);
    EXPECT_FLOAT_EQ(p->scale, 5.0f / 3.0f);
  }
}

TEST(LoraRead, PeftAndOldDiffusersNames) {
  const LoraFile peft = read_lora(lora_file("peft"), tiny_keys());
  EXPECT_EQ(peft.format, "diffusers/PEFT");
  EXPECT_EQ(peft.pairs.size(), 15u);
  for (const auto& p : peft.pairs) EXPECT_EQ(p.scale, 1.0f) << "no alpha: scale 1";
  const LoraFile old = read_lora(lora_file("diffusers_old"), tiny_keys());
  EXPECT_EQ(old.format, "diffusers (attention processors)");
  ASSERT_TRUE(find(old, "down_blocks.0.attentions.1.transformer_blocks.0.attn1.to_out.0.weight"));
  ASSERT_TRUE(find(old, "text_model.encoder.layers.2.self_attn.out_proj.weight"));
  EXPECT_EQ(find(old, "text_model.encoder.layers.0.self_attn.q_proj.weight")->origin,
            "text_encoder.text_model.encoder.layers.0.self_attn.to_q_lora.down.weight");
}

TEST(LoraRead, RefusesLycoris) {
  EXPECT_NE(read_error("loha", {{kQ + ".hada_w1_a", filled({4, 32}, 0.1f)}}).find("LyCORIS LoHa"), std::string::npos);
  EXPECT_NE(read_error("lokr", {{kQ + ".lokr_w1", filled({4, 4}, 0.1f)}}).find("LyCORIS LoKr"), std::string::npos);
  const std::string dora = read_error("dora", {{kQ + ".lora_down.weight", filled({4, 32}, 0.1f)},
                                               {kQ + ".lora_up.weight", filled({32, 4}, 0.1f)},
                                               {kQ + ".dora_scale", filled({1, 32}, 1.0f)}});
  EXPECT_NE(dora.find("LyCORIS DoRA"), std::string::npos);
  EXPECT_NE(dora.find(kQ + ".dora_scale"), std::string::npos);
}

TEST(LoraRead, RefusesOtherArchitectures) {
  // SDXL's cross-attention reads 2048-wide text embeddings: to_k's down is (rank, 2048).
  const std::string k = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k";
  const std::string sdxl = read_error("sdxl_shapes", {{k + ".lora_down.weight", filled({4, 2048}, 0.1f)},
                                                      {k + ".lora_up.weight", filled({32, 4}, 0.1f)}});
  EXPECT_NE(sdxl.find(k + ".lora_down.weight"), std::string::npos);
  EXPECT_NE(sdxl.find("(4, 2048)"), std::string::npos) << "the shape found";
  EXPECT_NE(sdxl.find("(32, 32)"), std::string::npos) << "the shape expected";
  const std::string te2 = read_error("sdxl_te2", {{"lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight",
                                                   filled({4, 32}, 0.1f)}});
  EXPECT_NE(te2.find("SDXL"), std::string::npos);
  const std::string deeper = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_5_attn1_to_q";
  const std::string absent = read_error("no_such_module", {{deeper + ".lora_down.weight", filled({4, 32}, 0.1f)},
                                                           {deeper + ".lora_up.weight", filled({32, 4}, 0.1f)}});
  EXPECT_NE(absent.find(deeper), std::string::npos);
  EXPECT_NE(absent.find("does not have"), std::string::npos);
  const std::string conv = read_error("conv_kernel", {{"lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight",
                                                       filled({4, 32, 1, 1}, 0.1f)},
                                                      {"lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight",
                                                       filled({32, 4, 1, 1}, 0.1f)}});
  EXPECT_NE(conv.find("does not fit"), std::string::npos) << "a 1x1 update for a 3x3 convolution";
}

TEST(LoraRead, RefusesHostileAndBrokenFiles) {
  EXPECT_NE(read_error("checkpoint", {{"model.diffusion_model.input_blocks.0.0.weight", filled({32, 4, 3, 3}, 0.1f)}})
                .find("checkpoint rather than a LoRA"),
            std::string::npos);
  EXPECT_NE(read_error("rank", {{kQ + ".lora_down.weight", filled({40, 32}, 0.1f)},
                                {kQ + ".lora_up.weight", filled({32, 40}, 0.1f)}})
                .find("rank 40"),
            std::string::npos);
  EXPECT_NE(read_error("nan_alpha", {{kQ + ".lora_down.weight", filled({4, 32}, 0.1f)},
                                     {kQ + ".lora_up.weight", filled({32, 4}, 0.1f)},
                                     {kQ + ".alpha", filled({1}, NAN)}})
                .find("expected a positive number"),
            std::string::npos);
  EXPECT_NE(read_error("inf_weight", {{kQ + ".lora_down.weight", filled({4, 32}, INFINITY)},
                                      {kQ + ".lora_up.weight", filled({32, 4}, 0.1f)}})
                .find("NaN or infinite"),
            std::string::npos);
  EXPECT_NE(read_error("half", {{kQ + ".lora_down.weight", filled({4, 32}, 0.1f)}}).find("no matching up"),
            std::string::npos);
  EXPECT_NE(read_error("ranks", {{kQ + ".lora_down.weight", filled({4, 32}, 0.1f)},
                                 {kQ + ".lora_up.weight", filled({32, 3}, 0.1f)}})
                .find("different ranks"),
            std::string::npos);
  EXPECT_NE(read_error("empty", {}).find("holds no tensors"), std::string::npos);
  // Not a safetensors file at all: the reader's own checks, naming the file.
  const fs::path junk = test::temp_dir("lora_io_junk") / "junk.safetensors";
  std::ofstream(junk) << "\xff\xff\xff\xff\xff\xff\xff\x7fnot a header";
  try {
    read_lora(junk, tiny_keys());
    ADD_FAILURE() << "junk was read";
  } catch (const Error& e) {
    std::printf("junk: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("junk.safetensors"), std::string::npos);
  }
}

TEST(LoraRead, A1x1UpdateFitsALinearOfTheSameSize) {
  // kohya trains SD 1.x's proj_in as a 1x1 conv; SD 2.x models have it as a linear layer.
  const std::string m = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
  const std::string e = read_error("conv_on_linear", {{m + ".lora_down.weight", filled({2, 32, 1, 1}, 0.1f)},
                                                      {m + ".lora_up.weight", filled({32, 2, 1, 1}, 0.1f)}});
  EXPECT_EQ(e, "(no error)");
}
