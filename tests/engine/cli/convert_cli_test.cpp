// `octodiff-cli convert`: tiny-sd (safetensors) → Flax msgpack → safetensors gives back every
// tensor bit for bit; the Flax folder it writes matches tools/goldens/make_tiny_sd_flax.py's
// (the Python torch → Flax rules) tensor for tensor; bf16 output and bad arguments.
#include <gtest/gtest.h>

#include <cstring>

#include "io/flax_msgpack.h"
#include "io/safetensors.h"
#include "cli_runner.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

struct Weights {
  const char* component;
  const char* safetensors;
  const char* flax;
};
constexpr Weights kWeights[] = {{"text_encoder", "model.safetensors", "flax_model.msgpack"},
                                {"unet", "diffusion_pytorch_model.safetensors", "diffusion_flax_model.msgpack"},
                                {"vae", "diffusion_pytorch_model.safetensors", "diffusion_flax_model.msgpack"}};

// Same names, dtypes, shapes and bytes.
void expect_same_tensors(const SafetensorsFile& a, const SafetensorsFile& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size()) << a.path() << " vs " << b.path();
  size_t bytes = 0;
  for (const TensorRecord& t : a.tensors()) {
    const TensorRecord* u = b.find(t.name);
    ASSERT_NE(u, nullptr) << t.name << " missing from " << b.path();
    EXPECT_EQ(t.dtype, u->dtype) << t.name;
    ASSERT_EQ(t.shape, u->shape) << t.name;
    ASSERT_TRUE(t.pieces.empty() && u->pieces.empty());
    EXPECT_EQ(std::memcmp(a.bytes(t), b.bytes(*u), t.nbytes()), 0) << t.name;
    bytes += t.nbytes();
  }
  std::printf("  %s: %zu tensors, %zu bytes identical\n", b.path().filename().c_str(), a.tensors().size(), bytes);
}

}  // namespace

TEST(ConvertCli, SafetensorsToFlaxAndBackIsBitExact) {
  const fs::path dir = test::temp_dir("convert_round_trip");
  test::CliRun r = test::run_cli({"convert", "--to", "flax", test::tiny_sd_dir().string(), "flax"}, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  r = test::run_cli({"convert", "--to", "safetensors", "flax", "back"}, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::printf("%s", r.out.c_str());
  for (const Weights& w : kWeights) {
    auto original = SafetensorsFile::open(test::tiny_sd_dir() / w.component / w.safetensors);
    auto back = SafetensorsFile::open(dir / "back" / w.component / w.safetensors);
    expect_same_tensors(*original, *back);
    // The Flax files hold what the Python tool (diffusers' rules) writes, name for name.
    auto ours = open_flax_msgpack(dir / "flax" / w.component / w.flax);
    auto tools = open_flax_msgpack(test::data_dir() / "tiny-sd-flax" / "f32" / w.component / w.flax);
    expect_same_tensors(*tools, *ours);
    EXPECT_FALSE(fs::exists(dir / "flax" / w.component / w.safetensors));
  }
  for (const char* f : {"model_index.json", "tokenizer/vocab.json", "scheduler/scheduler_config.json", "unet/config.json"})
    EXPECT_EQ(read_text_file(dir / "back" / f), read_text_file(test::tiny_sd_dir() / f)) << f;
}

TEST(ConvertCli, Bf16OutputMatchesTheToolsBf16Folder) {
  const fs::path dir = test::temp_dir("convert_bf16");
  const test::CliRun r =
      test::run_cli({"convert", "--to", "flax", "--dtype", "bf16", test::tiny_sd_dir().string(), "flax"}, dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  for (const Weights& w : kWeights) {
    auto ours = open_flax_msgpack(dir / "flax" / w.component / w.flax);
    auto tools = open_flax_msgpack(test::data_dir() / "tiny-sd-flax" / "bf16" / w.component / w.flax);
    expect_same_tensors(*tools, *ours);  // both round float32 to nearest even
  }
}

TEST(ConvertCli, BadArgumentsAreErrors) {
  const fs::path dir = test::temp_dir("convert_bad");
  test::CliRun r = test::run_cli({"convert", "--to", "onnx", test::tiny_sd_dir().string(), "x"}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--to must be safetensors or flax"), std::string::npos) << r.err;
  r = test::run_cli({"convert", "--to", "flax", (test::tiny_sd_dir() / "unet").string(), "x"}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not a diffusers model folder"), std::string::npos) << r.err;
  fs::create_directories(dir / "full");
  write_file_atomic(dir / "full" / "f", "x", 1);
  r = test::run_cli({"convert", "--to", "flax", test::tiny_sd_dir().string(), "full"}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
}
