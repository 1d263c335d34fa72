// Fuzz target: a PNG as the app's import reads it — decoded (libpng) with its text chunks, the
// chunks parsed as Octodiff/A1111 metadata and turned into a request.
#include <cstdint>

#include "core/error.h"
#include "io/png.h"
#include "pipeline/metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    std::vector<octodiff::PngText> texts;
    (void)octodiff::decode_png(data, size, &texts);
    if (auto m = octodiff::parse_png_metadata(texts)) (void)octodiff::request_from_metadata(*m);
  } catch (const octodiff::Error&) {
  }
  return 0;
}
