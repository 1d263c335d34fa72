// Reading SDXL LoRA files (io/lora.h) against the tiny SDXL's own tensors (tests/data/tiny-sdxl):
// kohya's LDM names with SDXL's transformer_blocks under input_blocks/middle_block/output_blocks,
// lora_te1_ / lora_te2_, diffusers/PEFT text_encoder_2., and the refusals that name the file and
// the tensor (tests/data/tiny-sdxl-lora, tools/goldens/make_sdxl_lora_goldens.py).
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/lora.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

const LoraKeyMap& sdxl_keys() {
  static const LoraKeyMap keys = [] {
    const fs::path d = test::data_dir() / "tiny-sdxl";
    LoraTargets t;
    t.unet = test::tensor_shapes_of(d / "unet" / "diffusion_pytorch_model.safetensors");
    t.text_encoder = test::tensor_shapes_of(d / "text_encoder" / "model.safetensors");
    t.text_encoder_2 = test::tensor_shapes_of(d / "text_encoder_2" / "model.safetensors");
    return LoraKeyMap(t);
  }();
  return keys;
}

fs::path lora_file(const std::string& name) { return test::data_dir() / "tiny-sdxl-lora" / (name + ".safetensors"); }

const LoraPair* find(const LoraFile& f, LoraComponent c, const std::string& parameter) {
  for (const auto& p : f.pairs)
    if (p.target.component == c && p.target.parameter == parameter) return &p;
  return nullptr;
}

std::string read_error(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const fs::path p = test::temp_dir("sdxl_lora_io") / (name + ".safetensors");
  write_safetensors_f32(p, tensors);
  try {
    read_lora(p, sdxl_keys());
  } catch (const Error& e) {
    std::printf("%s: %s\n", name.c_str(), e.what());
    EXPECT_NE(std::string(e.what()).find(p.filename().string()), std::string::npos) << "names the file";
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SdxlLoraRead, KohyaLdmNamesReachSdxlTransformerBlocks) {
  const LoraFile f = read_lora(lora_file("kohya_ldm"), sdxl_keys());
  EXPECT_EQ(f.format, "kohya + kohya (LDM names)");
  const std::pair<const char*, const char*> expected[] = {
      {"down_blocks.2.attentions.1.transformer_blocks.1.attn2.to_k.weight",
       "lora_unet_input_blocks_8_1_transformer_blocks_1_attn2_to_k.lora_down.weight"},
      {"mid_block.attentions.0.transformer_blocks.0.attn1.to_out.0.weight",
       "lora_unet_middle_block_1_transformer_blocks_0_attn1_to_out_0.lora_down.weight"},
      {"up_blocks.0.attentions.2.transformer_blocks.1.attn2.to_v.weight",
       "lora_unet_output_blocks_2_1_transformer_blocks_1_attn2_to_v.lora_down.weight"},
      {"down_blocks.0.downsamplers.0.conv.weight", "lora_unet_input_blocks_3_0_op.lora_down.weight"},
      {"up_blocks.0.upsamplers.0.conv.weight", "lora_unet_output_blocks_2_2_conv.lora_down.weight"},
  };
  for (const auto& [parameter, origin] : expected) {
    const LoraPair* p = find(f, LoraComponent::UNet, parameter);
    ASSERT_TRUE(p) << parameter;
    EXPECT_EQ(p->origin, origin);
    EXPECT_FLOAT_EQ(p->scale, 5.0f / 3.0f);
  }
  const LoraPair* te2 = find(f, LoraComponent::TextEncoder2, "text_model.encoder.layers.1.self_attn.v_proj.weight");
  ASSERT_TRUE(te2);
  EXPECT_EQ(te2->origin, "lora_te2_text_model_encoder_layers_1_self_attn_v_proj.lora_down.weight");
  EXPECT_EQ(te2->down.shape(), (Shape{3, 48}));
  ASSERT_TRUE(find(f, LoraComponent::TextEncoder2, "text_projection.weight"));
  const LoraPair* te1 = find(f, LoraComponent::TextEncoder, "text_model.encoder.layers.3.mlp.fc1.weight");
  ASSERT_TRUE(te1);
  EXPECT_EQ(te1->origin, "lora_te1_text_model_encoder_layers_3_mlp_fc1.lora_down.weight");
}

TEST(SdxlLoraRead, PeftNamesTheSecondTextEncoder) {
  const LoraFile f = read_lora(lora_file("peft"), sdxl_keys());
  EXPECT_EQ(f.format, "diffusers/PEFT");
  EXPECT_EQ(f.pairs.size(), 14u + 3u + 4u);
  const LoraPair* p = find(f, LoraComponent::TextEncoder2, "text_model.encoder.layers.0.mlp.fc2.weight");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->origin, "text_encoder_2.text_model.encoder.layers.0.mlp.fc2.lora_A.weight");
  EXPECT_EQ(p->scale, 1.0f);
}

TEST(SdxlLoraRead, MisfitsNameTheFileAndTheTensor) {
  // text_encoder_2 is 48 wide: an update for a 1280-wide tower (full-size SDXL) does not fit.
  const std::string k = "lora_te2_text_model_encoder_layers_0_self_attn_q_proj";
  const std::string wide = read_error("te2_wide", {{k + ".lora_down.weight", Tensor::full({4, 1280}, 0.1f)},
                                                   {k + ".lora_up.weight", Tensor::full({1280, 4}, 0.1f)}});
  EXPECT_NE(wide.find(k + ".lora_down.weight"), std::string::npos) << wide;
  EXPECT_NE(wide.find("(48, 48)"), std::string::npos) << wide;
  EXPECT_NE(wide.find("SD 1.x/2.x on this SDXL model"), std::string::npos) << wide;
  // SD 1.x's first level has attentions; SDXL's has none.
  const std::string q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
  const std::string absent = read_error("sd1_module", {{q + ".lora_down.weight", Tensor::full({4, 8}, 0.1f)},
                                                       {q + ".lora_up.weight", Tensor::full({8, 4}, 0.1f)}});
  EXPECT_NE(absent.find(q), std::string::npos) << absent;
  EXPECT_NE(absent.find("UNet does not have"), std::string::npos) << absent;
  const std::string te2 = "text_encoder_2.text_model.encoder.layers.7.mlp.fc1";
  const std::string deeper = read_error("te2_layer", {{te2 + ".lora_A.weight", Tensor::full({2, 48}, 0.1f)},
                                                      {te2 + ".lora_B.weight", Tensor::full({60, 2}, 0.1f)}});
  EXPECT_NE(deeper.find("second text encoder (text_encoder_2) does not have"), std::string::npos) << deeper;
}
