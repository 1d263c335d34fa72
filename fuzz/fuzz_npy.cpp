// Fuzz target: a .npy file (magic, version, header dict, dtype, shape, data size).
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  octodiff::fuzz::MemoryFile file(data, size);
  try {
    (void)octodiff::read_npy(file.path());
  } catch (const octodiff::Error&) {
  }
  return 0;
}
