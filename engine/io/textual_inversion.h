// Textual-inversion embeddings (`.safetensors`): one or more learned token-embedding vectors that
// a prompt calls by the file's stem, A1111's way ("my-style" in a prompt calls my-style.safetensors;
// pipeline/prompt_chunks.h puts each vector at a token position of its own).
//
// Layouts read:
//   A1111           `emb_params`            (n, width) or (width,)
//   A1111 (older)   `string_to_param.*`     (n, width) or (width,); `string_to_token.*` is ignored
//   diffusers       one tensor named after its placeholder token, e.g. `<cat-toy>` in
//                   learned_embeds.safetensors: (width,) or (n, width). Its token name is not used:
//                   the file's stem calls it, as for the other layouts.
//   SDXL            `clip_l` (n, 768) for the first text tower and `clip_g` (n, 1280) for the
//                   second, the same n (A1111's and the SDXL trainers' layout); nothing else.
// Refused with an octodiff::Error naming the file: whatever the safetensors reader refuses
// (hostile or truncated headers, io/safetensors.h); files with several tensors of no known layout;
// an SDXL file without one of clip_l/clip_g, with another tensor beside them, or with different
// vector counts in the two; integer tensors; rank > 2; no vectors; more than 75 vectors (they could
// not fit in one chunk); NaN or infinite values. Whether an embedding fits the model is checked
// where it is used (pipeline/prompt_chunks.h: an SDXL embedding only on SDXL models, the others
// only on SD 1.x/2.x; the width must equal the text encoder's hidden size: 768 for SD 1.x, 1024
// for SD 2.x, 768 and 1280 for SDXL's two towers).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace octodiff {

struct TextualInversion {
  std::string name;            // the file's stem: the word that calls it
  std::filesystem::path path;
  std::string layout;          // "emb_params", "string_to_param", "diffusers", "sdxl"
  Tensor vectors;              // n × width, float32 (SDXL: clip_l's, for the first text tower)
  Tensor vectors_g;            // SDXL only: clip_g's, n × width_g, for the second text tower
  int64_t count() const { return vectors.dim(0); }
  int64_t width() const { return vectors.dim(1); }
  bool is_sdxl() const { return layout == "sdxl"; }
};

TextualInversion read_textual_inversion(const std::filesystem::path& path);

// Every *.safetensors directly in `dir`, sorted by name. A file that cannot be read stays in the
// list with its error (and no vectors), so that a bad file only fails the prompts that call it.
struct TextualInversionEntry {
  TextualInversion embedding;  // name and path always set
  std::string error;           // empty when the embedding was read
};
struct TextualInversionLibrary {
  std::filesystem::path dir;
  std::vector<TextualInversionEntry> entries;
};
// A missing or unreadable folder is an octodiff::Error naming it.
TextualInversionLibrary read_textual_inversion_folder(const std::filesystem::path& dir);

}  // namespace octodiff
