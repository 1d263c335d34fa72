// Fuzz target: a .safetensors file — header length, JSON header, dtypes, shapes, offsets — then
// every tensor converted as the loaders convert them.
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  octodiff::fuzz::MemoryFile file(data, size);
  try {
    auto f = octodiff::SafetensorsFile::open(file.path());
    for (const auto& t : f->tensors()) {
      if (t.numel() > (1 << 20)) continue;  // valid but large: converting it only costs time
      try {
        (void)f->to_f32(t);
      } catch (const octodiff::Error&) {  // integer tensors are an error to read as floats
      }
      try {
        (void)f->to_i64(t);
      } catch (const octodiff::Error&) {
      }
    }
  } catch (const octodiff::Error&) {
  }
  return 0;
}
