// Fuzz target: a single-file checkpoint (.safetensors with LDM keys): the header, the component
// detection and the LDM → diffusers key mapping, without and with EMA weights asked for.
//
// Asking for EMA weights changes only what read_unet does when the file has them (more than 100
// tensors named "model_ema.…", io/single_file.cpp); otherwise both reads run the same code on the
// same bytes. So the second read runs only when the file may have them: when "model_ema." occurs
// more than 100 times in the input, or when it has a backslash (a JSON escape may spell a name).
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/single_file.h"

namespace {

bool may_have_ema_weights(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.find('\\') != std::string_view::npos) return true;
  int names = 0;
  for (size_t at = bytes.find("model_ema."); at != std::string_view::npos; at = bytes.find("model_ema.", at + 1))
    if (++names > 100) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  octodiff::fuzz::MemoryFile file(data, size);
  for (bool ema : {false, true}) {
    if (ema && !may_have_ema_weights(data, size)) break;
    try {
      (void)octodiff::open_single_file(file.path(), ema);
    } catch (const octodiff::Error&) {
    }
  }
  return 0;
}
