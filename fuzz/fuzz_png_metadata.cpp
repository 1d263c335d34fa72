// Fuzz target: the text of a PNG's metadata chunks — A1111 "parameters" text and Octodiff's JSON
// — parsed and turned into a request, without libpng in the way. Input: parameters \n@@\n json.
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "pipeline/metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = octodiff::fuzz::split_parts(data, size, 2);
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<octodiff::PngText> texts;
    if (variant != 1) texts.push_back({"parameters", parts[0]});
    if (variant != 0) texts.push_back({"octodiff", parts[1]});
    try {
      if (auto m = octodiff::parse_png_metadata(texts)) (void)octodiff::request_from_metadata(*m);
    } catch (const octodiff::Error&) {
    }
  }
  return 0;
}
