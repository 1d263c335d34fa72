// Fuzz target: a prompt as people paste it — A1111's emphasis syntax (brackets, weights, escapes,
// BREAK) — and a textual-inversion embedding file (.safetensors in A1111's and diffusers' layouts).
// Input: prompt \n@@\n embedding file bytes.
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/textual_inversion.h"
#include "text/prompt_syntax.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octodiff;
  const auto parts = fuzz::split_parts(data, size, 2);
  for (PromptSyntax syntax : {PromptSyntax::Plain, PromptSyntax::A1111}) {
    try {
      (void)parse_prompt(parts[0], syntax);
    } catch (const Error&) {
    }
  }
  fuzz::MemoryFile file(reinterpret_cast<const uint8_t*>(parts[1].data()), parts[1].size());
  try {
    (void)read_textual_inversion(file.path());
  } catch (const Error&) {
  }
  return 0;
}
