// Fuzz target: a Flax msgpack checkpoint (flax.serialization: nested maps, ndarray ext types,
// chunked leaves) opened as the model loader opens it, every small tensor converted.
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/flax_msgpack.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  octodiff::fuzz::MemoryFile file(data, size);
  try {
    auto f = octodiff::open_flax_msgpack(file.path());
    for (const auto& t : f->tensors()) {
      if (t.numel() > (1 << 20)) continue;
      try {
        (void)f->to_f32(t);
      } catch (const octodiff::Error&) {
      }
    }
  } catch (const octodiff::Error&) {
  }
  return 0;
}
