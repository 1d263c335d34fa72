// Prompts as AUTOMATIC1111 encodes them (modules/sd_hijack_clip.py,
// FrozenCLIPEmbedderWithCustomWords): weighted runs → 75-token chunks → CLIP per chunk →
// weights applied with the mean restored → chunks concatenated along the sequence axis.
//
// Layout (tokenize_line). Each run of the prompt (text/prompt_syntax.h; the plain syntax is one
// run of weight 1) is tokenized on its own, without bos/eos. Its tokens are appended to the current
// chunk with the run's weight as their multiplier; a chunk holding 75 tokens is closed before the
// next token is added. A BREAK closes the current chunk (even an empty one). A textual-inversion
// embedding (io/textual_inversion.h) is found where the tokens of its name appear (the name
// tokenized like the prompt, so case-insensitively; the longest name first); it takes one position
// per vector, with the run's weight, and moves to a new chunk when its vectors do not fit in this
// one. Optional comma backtrack (A1111's "comma_padding_backtrack", 20 in A1111's settings, 0 =
// off here): when a chunk is full and its last comma is at most N tokens back, the tokens after
// that comma move to the next chunk. Closing a chunk pads it to 75 with the tokenizer's pad token
// (multiplier 1) and wraps it as [bos] + 75 + [eos] = 77 tokens — the eos and pad tokens are
// those of the tokenizer (SD 1.x: pad = eos; SD 2.x: "!"), which is what A1111's id_end/id_pad
// replacement gives. A prompt with no tokens is one chunk ("" encoded).
//
// Encoding (process_tokens + the "Original" emphasis). Every 77-token chunk goes through CLIP on
// its own (so every chunk has positions 0..76); textual-inversion vectors replace the rows of the
// token-embedding layer at their positions (ClipTextModel::embed_tokens / forward_embeddings).
// Then, with z the chunk's last_hidden_state (77 × hidden) and w its multipliers:
//     z' = z · w[:, None];   z'' = z' · (mean(z) / mean(z'))     (means over all of the chunk)
// A chunk whose multipliers are all 1 is left as CLIP returned it (the formula is then the
// identity); a chunk whose mean(z') is exactly 0 keeps z' (A1111 would divide by zero). Beware:
// when mean(z) is near 0 (a final LayerNorm without bias, as in tests/data/tiny-sd) the ratio is
// rounding noise over rounding noise — in A1111 as here; real checkpoints' LayerNorms have a bias. A1111 takes the two means over the batch of prompts it encodes together; here they
// are taken per prompt and chunk, so that an image does not depend on its batch-mates (the same
// values when the batch's prompts are equal).
//
// Several rows in one UNet batch ([negative prompts; prompts] with guidance, and the B images of
// a device) must have the same length: rows with fewer chunks are padded with the encoding of the
// empty prompt, one per missing chunk, as A1111 pads the shorter of cond/uncond (pad_cond) and the
// shorter prompts of a batch (empty_chunk). The padding is per device, so an image depends only
// on its own prompts when batch_per_device is 1.
//
// SDXL runs all of this per text tower, on their penultimate hidden states, with SDXL embeddings
// (clip_l for the first tower, clip_g for the second): pipeline/sdxl_prompt_chunks.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/textual_inversion.h"
#include "models/clip_text_model.h"
#include "pipeline/text_encoding_cache.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_syntax.h"

namespace octodiff {

// truncate — one 77-token window (today's and the Flax pipeline's rule), with a warning when
//            tokens are dropped; chunk — every token, 77 per chunk (A1111/ComfyUI).
enum class LongPrompts { Truncate, Chunk };
LongPrompts parse_long_prompts(const std::string& name);  // "truncate", "chunk"
std::string long_prompts_name(LongPrompts l);

constexpr int kChunkTokens = 75;  // content tokens per chunk; + bos + eos = 77

// Which text tower an embedding's vectors are for: SD 1.x/2.x's only one, or SDXL's first
// (CLIP ViT-L: the file's clip_l) or second (OpenCLIP bigG: clip_g).
enum class EmbeddingTower { Single, SdxlFirst, SdxlSecond };

// The tokenized names of a library's embeddings, for finding them in token sequences.
class EmbeddingVocabulary {
 public:
  EmbeddingVocabulary() = default;
  // width: the text encoder's hidden size, which every embedding used must have.
  EmbeddingVocabulary(const TextualInversionLibrary& library, const ClipTokenizer& tokenizer, int64_t width,
                      EmbeddingTower tower = EmbeddingTower::Single);
  struct Found {
    const TextualInversion* embedding = nullptr;  // nullptr: none at this position
    const Tensor* vectors = nullptr;              // this tower's: n × width
    size_t name_tokens = 0;
  };
  // The embedding whose name's tokens start at tokens[position] (the longest such name). Using a
  // file that could not be read, an embedding of the other family (SDXL's on a Single tower, an
  // SD 1.x/2.x one on an SDXL tower) or one whose width is not the encoder's is an
  // octodiff::Error naming the file.
  Found find(const std::vector<int32_t>& tokens, size_t position) const;

 private:
  struct Name {
    std::vector<int32_t> tokens;
    const TextualInversionEntry* entry;
  };
  const Tensor& vectors_for_tower(const TextualInversion& embedding) const;
  std::vector<Name> names_;  // longest first
  int64_t width_ = 0;
  EmbeddingTower tower_ = EmbeddingTower::Single;
};

struct PromptChunk {
  std::vector<int32_t> ids;        // 77: bos, 75 tokens or padding, eos
  std::vector<float> multipliers;  // 77: weights (1 for bos, eos, padding)
  struct Fix {
    int position = 0;  // index in ids of the first vector
    Tensor vectors;    // n × hidden: the embedding's (shares its storage, so the chunk outlives the library)
  };
  std::vector<Fix> fixes;          // textual-inversion vectors to put in place of ids' rows
};

struct PromptLayout {
  std::vector<PromptChunk> chunks;          // at least one
  int token_count = 0;                      // tokens of the prompt (A1111's count: 75 per full chunk)
  std::vector<std::string> embeddings_used;  // names, in order of appearance
};

struct PromptLayoutOptions {
  PromptSyntax syntax = PromptSyntax::Plain;
  int comma_backtrack = 0;                        // 0: off; A1111's default setting is 20
  const EmbeddingVocabulary* embeddings = nullptr;  // may be null: no embeddings
};

// Throws octodiff::Error for text the tokenizer refuses or a bad weight.
PromptLayout layout_prompt(const ClipTokenizer& tokenizer, const std::string& prompt,
                           const PromptLayoutOptions& options);

// The rows' embeddings, (rows, chunks·77, hidden) with chunks = the most any row has (the others
// padded with the empty prompt's encoding, `empty`).
// A chunk's TextEncodingCache key: its ids and textual-inversion vectors (not its weights,
// which apply after the encoder), and the encoder's layers skipped.
std::string chunk_key(const PromptChunk& chunk, int skipped_layers = 0);

// With a cache, chunks it holds are not encoded again (text_encoding_cache.h). skipped_layers:
// the encoder's last layers not run (ClipTextModel::forward_embeddings).
Tensor encode_prompt_layouts(const ClipTextModel& encoder, const std::vector<const PromptLayout*>& rows,
                             const PromptLayout& empty, TextEncodingCache* cache = nullptr,
                             int skipped_layers = 0);

// The pieces of encode_prompt_layouts, for encoders that take other hidden states (SDXL):
// the most chunks any row has (at least 1);
size_t most_chunks(const std::vector<const PromptLayout*>& rows);
// the rows' chunks row-major (rows × chunks), a row's missing chunks being empty.chunks[0];
std::vector<const PromptChunk*> padded_chunks(const std::vector<const PromptLayout*>& rows, const PromptLayout& empty,
                                              size_t chunks);
// the chunks' token embeddings, N × 77 × hidden, with the textual-inversion vectors in place, and
// their ids (N·77) in *ids;
Tensor embed_chunks(const ClipTextModel& encoder, const std::vector<const PromptChunk*>& chunks,
                    std::vector<int32_t>* ids);
// every chunk's weights applied to z (N × 77 × hidden), the mean restored per chunk.
void apply_chunk_weights(Tensor& z, const std::vector<const PromptChunk*>& chunks);

// z' = z·w then z'·(mean(z)/mean(z')) on one chunk: z is 77 × hidden floats, w 77 weights.
void apply_weights_restoring_mean(float* z, const std::vector<float>& weights, int64_t hidden);

}  // namespace octodiff
