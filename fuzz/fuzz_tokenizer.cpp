// Fuzz target: a tokenizer folder — vocab.json, merges.txt, tokenizer_config.json — and a prompt
// encoded with it. Input: vocab \n@@\n merges \n@@\n tokenizer_config \n@@\n prompt.
#include <cstdint>
#include <filesystem>

#include "core/error.h"
#include "fuzz_input.h"
#include "text/clip_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  using namespace octodiff;
  const auto parts = fuzz::split_parts(data, size, 4);
  const fs::path dir = fuzz::scratch_dir();
  fuzz::write_file(dir / "vocab.json", parts[0]);
  fuzz::write_file(dir / "merges.txt", parts[1]);
  if (parts[2].empty())
    fs::remove(dir / "tokenizer_config.json");
  else
    fuzz::write_file(dir / "tokenizer_config.json", parts[2]);
  try {
    const ClipTokenizer tokenizer = ClipTokenizer::from_folder(dir);
    for (auto cleanup : {ClipTokenizer::Cleanup::Ftfy, ClipTokenizer::Cleanup::Basic}) {
      try {
        (void)tokenizer.encode(parts[3], cleanup);
      } catch (const Error&) {  // invalid UTF-8
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
