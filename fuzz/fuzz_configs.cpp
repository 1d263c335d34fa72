// Fuzz target: a model folder's JSON configs — the same text read as every component's
// config.json and as scheduler_config.json for every scheduler class.
//
// Text that does not parse fails every reader of a kind the same way, in the first thing each
// does: the model configs' JSON parse (models/configs.cpp: json::parse, which json::accept tells
// in advance) and the scheduler configs' (schedulers/scheduler_config.cpp: its own parse, NaN and
// Infinity allowed, whose two messages tell). Such text goes to one reader of the kind, not to
// all (4 model and 7 scheduler readers): the same code, a fraction of the time, as most mutated
// inputs are broken JSON. Text that parses goes to every reader.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"
#include "models/configs.h"
#include "schedulers/scheduler.h"

namespace {

// The error a reader throws ("" when it reads the text).
template <typename Read>
std::string error_of(Read&& read) {
  try {
    read();
  } catch (const octodiff::Error& e) {
    return e.what();
  }
  return {};
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octodiff;
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)error_of([&] { (void)UNetConfig::from_json(text, "unet/config.json"); });
  if (nlohmann::json::accept(text)) {
    (void)error_of([&] { (void)ClipTextConfig::from_json(text, "text_encoder/config.json"); });
    (void)error_of([&] { (void)VaeConfig::from_json(text, "vae/config.json"); });
    (void)error_of([&] { (void)AutoencoderTinyConfig::from_json(text, "taesd/config.json"); });
  }
  const std::string first = error_of([&] { (void)SchedulerConfig::from_json(text, SchedulerKind::Pndm); });
  if (starts_with(first, "scheduler config is not valid JSON") || starts_with(first, "scheduler config must be a JSON object"))
    return 0;
  for (SchedulerKind kind : all_scheduler_kinds())
    if (kind != SchedulerKind::Pndm) (void)error_of([&] { (void)SchedulerConfig::from_json(text, kind); });
  return 0;
}
