// Fuzz target: the text of a PNG's metadata chunks — A1111 "parameters" text and Octodiff's JSON
// — parsed and turned into a request, without libpng in the way. Input: parameters \n@@\n json.
//
// Each text is read alone. (Both together run the same two readers again: parse_png_metadata
// tries the JSON first and falls back to the A1111 text, so the pair's result is one of these.)
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "pipeline/metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = octodiff::fuzz::split_parts(data, size, 2);
  for (const char* key : {"parameters", "octodiff"}) {
    std::vector<octodiff::PngText> texts;
    texts.push_back({key, key[0] == 'p' ? parts[0] : parts[1]});
    try {
      if (auto m = octodiff::parse_png_metadata(texts)) (void)octodiff::request_from_metadata(*m);
    } catch (const octodiff::Error&) {
    }
  }
  return 0;
}
