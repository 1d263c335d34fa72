// Fuzz target: a model folder's JSON configs — the same text read as every component's
// config.json and as scheduler_config.json for every scheduler class.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "models/configs.h"
#include "schedulers/scheduler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octodiff;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto attempt = [](auto&& read) {
    try {
      read();
    } catch (const Error&) {
    }
  };
  attempt([&] { (void)UNetConfig::from_json(text, "unet/config.json"); });
  attempt([&] { (void)ClipTextConfig::from_json(text, "text_encoder/config.json"); });
  attempt([&] { (void)VaeConfig::from_json(text, "vae/config.json"); });
  attempt([&] { (void)AutoencoderTinyConfig::from_json(text, "taesd/config.json"); });
  for (SchedulerKind kind : all_scheduler_kinds())
    attempt([&] { (void)SchedulerConfig::from_json(text, kind); });
  return 0;
}
