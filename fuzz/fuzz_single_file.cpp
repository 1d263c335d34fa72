// Fuzz target: a single-file checkpoint (.safetensors with LDM keys): the header, the component
// detection and the LDM → diffusers key mapping.
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/single_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  octodiff::fuzz::MemoryFile file(data, size);
  for (bool ema : {false, true}) {
    try {
      (void)octodiff::open_single_file(file.path(), ema);
    } catch (const octodiff::Error&) {
    }
  }
  return 0;
}
