// Fuzz target: a LoRA .safetensors file (kohya, diffusers/PEFT layouts) matched against the
// parameters of SD 1.5 (the table the loader builds for that model).
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/lora.h"
#include "pipeline/lora.h"

namespace {

const octodiff::LoraKeyMap& tiny_model_keys() {
  using namespace octodiff;
  static const LoraKeyMap keys = [] {
    UNetConfig unet;  // diffusers' defaults: SD 1.x's layout
    unet.cross_attention_dim = 768;
    return LoraKeyMap(lora_targets(unet, ClipTextConfig::sd1()));
  }();
  return keys;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  octodiff::fuzz::MemoryFile file(data, size);
  try {
    (void)octodiff::read_lora(file.path(), tiny_model_keys());
  } catch (const octodiff::Error&) {
  }
  return 0;
}
