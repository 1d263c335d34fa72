#include "pipeline/prompt_chunks.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace octodiff {

LongPrompts parse_long_prompts(const std::string& name) {
  if (name == "truncate") return LongPrompts::Truncate;
  if (name == "chunk") return LongPrompts::Chunk;
  fail("unknown long-prompt rule '", name, "' (truncate, chunk)");
}

std::string long_prompts_name(LongPrompts l) { return l == LongPrompts::Chunk ? "chunk" : "truncate"; }

EmbeddingVocabulary::EmbeddingVocabulary(const TextualInversionLibrary& library, const ClipTokenizer& tokenizer,
                                         int64_t width, EmbeddingTower tower)
    : width_(width), tower_(tower) {
  for (const TextualInversionEntry& e : library.entries) {
    std::vector<int32_t> tokens = tokenizer.tokenize(e.embedding.name);
    if (!tokens.empty()) names_.push_back({std::move(tokens), &e});
  }
  std::stable_sort(names_.begin(), names_.end(),
                   [](const Name& a, const Name& b) { return a.tokens.size() > b.tokens.size(); });
}

EmbeddingVocabulary::Found EmbeddingVocabulary::find(const std::vector<int32_t>& tokens, size_t position) const {
  for (const Name& name : names_) {
    if (position + name.tokens.size() > tokens.size() ||
        !std::equal(name.tokens.begin(), name.tokens.end(), tokens.begin() + static_cast<std::ptrdiff_t>(position)))
      continue;
    const TextualInversionEntry& e = *name.entry;
    if (!e.error.empty()) fail("embedding '", e.embedding.name, "' cannot be used: ", e.error);
    const Tensor& vectors = vectors_for_tower(e.embedding);
    return {&e.embedding, &vectors, name.tokens.size()};
  }
  return {};
}

const Tensor& EmbeddingVocabulary::vectors_for_tower(const TextualInversion& e) const {
  const std::string where = cat(e.path.string(), ": the embedding '", e.name, "'");
  if (tower_ == EmbeddingTower::Single && e.is_sdxl())
    fail(where, " is an SDXL embedding (tensors clip_l and clip_g); this model is SD 1.x/2.x, whose embeddings ",
         "hold one tensor (emb_params, string_to_param.* or diffusers' learned_embeds)");
  if (tower_ != EmbeddingTower::Single && !e.is_sdxl())
    fail(where, " is an SD 1.x/2.x embedding (", e.layout, " layout, width ", e.width(),
         "); an SDXL model needs an SDXL embedding with tensors clip_l and clip_g");
  const bool second = tower_ == EmbeddingTower::SdxlSecond;
  const Tensor& v = second ? e.vectors_g : e.vectors;
  if (v.dim(1) != width_) {
    if (tower_ == EmbeddingTower::Single)
      fail(where, " has width ", v.dim(1), "; this model's text encoder has width ", width_,
           " (an embedding for another architecture)");
    fail(where, ": tensor '", second ? "clip_g" : "clip_l", "' has width ", v.dim(1), "; this SDXL model's ",
         second ? "second" : "first", " text encoder has width ", width_, " (an embedding for another model)");
  }
  return v;
}

namespace {

// A1111's tokenize_line state: the chunk being filled and the ones closed.
struct ChunkBuilder {
  const ClipTokenizer& tok;
  PromptLayout layout;
  std::vector<int32_t> tokens;  // of the open chunk, without bos/eos
  std::vector<float> multipliers;
  std::vector<PromptChunk::Fix> fixes;
  int last_comma = -1;

  void close(bool is_last = false) {
    layout.token_count += is_last ? static_cast<int>(tokens.size()) : kChunkTokens;
    PromptChunk c;
    c.ids.reserve(kChunkTokens + 2);
    c.ids.push_back(tok.bos_id());
    c.ids.insert(c.ids.end(), tokens.begin(), tokens.end());
    c.multipliers.push_back(1.0f);
    c.multipliers.insert(c.multipliers.end(), multipliers.begin(), multipliers.end());
    c.ids.push_back(tok.eos_id());  // A1111: id_end first, then id_pad after it
    c.multipliers.push_back(1.0f);
    c.ids.resize(kChunkTokens + 2, tok.pad_id());
    c.multipliers.resize(kChunkTokens + 2, 1.0f);
    c.fixes = std::move(fixes);
    layout.chunks.push_back(std::move(c));
    tokens.clear();
    multipliers.clear();
    fixes.clear();
    last_comma = -1;
  }

  // A full chunk whose last comma is at most `backtrack` tokens back: the tokens after the comma
  // move to the next chunk.
  void backtrack_to_comma() {
    const size_t cut = static_cast<size_t>(last_comma) + 1;
    std::vector<int32_t> moved(tokens.begin() + static_cast<std::ptrdiff_t>(cut), tokens.end());
    std::vector<float> moved_w(multipliers.begin() + static_cast<std::ptrdiff_t>(cut), multipliers.end());
    tokens.resize(cut);
    multipliers.resize(cut);
    close();
    tokens = std::move(moved);
    multipliers = std::move(moved_w);
  }
};

void add_run(ChunkBuilder& b, const std::vector<int32_t>& run, float weight, int comma_id,
             const PromptLayoutOptions& options, std::vector<std::string>& used) {
  size_t position = 0;
  while (position < run.size()) {
    const int32_t token = run[position];
    const int size = static_cast<int>(b.tokens.size());
    if (token == comma_id) {
      b.last_comma = size;
    } else if (options.comma_backtrack != 0 && size == kChunkTokens && b.last_comma != -1 &&
               size - b.last_comma <= options.comma_backtrack) {
      b.backtrack_to_comma();
    }
    if (static_cast<int>(b.tokens.size()) == kChunkTokens) b.close();
    const auto found = options.embeddings ? options.embeddings->find(run, position) : EmbeddingVocabulary::Found{};
    if (!found.embedding) {
      b.tokens.push_back(token);
      b.multipliers.push_back(weight);
      ++position;
      continue;
    }
    const int64_t n = found.vectors->dim(0);
    if (static_cast<int64_t>(b.tokens.size()) + n > kChunkTokens) b.close();
    b.fixes.push_back({static_cast<int>(b.tokens.size()) + 1, *found.vectors});
    b.tokens.insert(b.tokens.end(), n, 0);
    b.multipliers.insert(b.multipliers.end(), n, weight);
    position += found.name_tokens;
    if (std::find(used.begin(), used.end(), found.embedding->name) == used.end()) used.push_back(found.embedding->name);
  }
}

}  // namespace

PromptLayout layout_prompt(const ClipTokenizer& tok, const std::string& prompt, const PromptLayoutOptions& options) {
  const std::vector<WeightedText> runs = parse_prompt(prompt, options.syntax);
  const std::vector<int32_t> comma = tok.tokenize(",");
  const int comma_id = comma.size() == 1 ? comma[0] : -1;
  ChunkBuilder b{tok, {}, {}, {}, {}, -1};
  std::vector<std::string> used;
  for (const WeightedText& run : runs) {
    if (run.is_break()) {
      b.close();
      continue;
    }
    add_run(b, tok.tokenize(run.text), static_cast<float>(run.weight), comma_id, options, used);
  }
  if (!b.tokens.empty() || b.layout.chunks.empty()) b.close(/*is_last=*/true);
  b.layout.embeddings_used = std::move(used);
  return std::move(b.layout);
}

void apply_weights_restoring_mean(float* z, const std::vector<float>& w, int64_t hidden) {
  const int64_t L = static_cast<int64_t>(w.size());
  if (std::all_of(w.begin(), w.end(), [](float x) { return x == 1.0f; })) return;
  double original = 0, weighted = 0;
  for (int64_t t = 0; t < L; ++t)
    for (int64_t c = 0; c < hidden; ++c) {
      float& v = z[t * hidden + c];
      original += v;
      v *= w[t];
      weighted += v;
    }
  if (weighted == 0) return;  // A1111 would divide by zero; z·w is kept
  const float ratio = static_cast<float>((original / static_cast<double>(L * hidden)) /
                                         (weighted / static_cast<double>(L * hidden)));
  for (int64_t i = 0; i < L * hidden; ++i) z[i] *= ratio;
}

size_t most_chunks(const std::vector<const PromptLayout*>& rows) {
  size_t chunks = 1;
  for (const PromptLayout* r : rows) chunks = std::max(chunks, r->chunks.size());
  return chunks;
}

std::vector<const PromptChunk*> padded_chunks(const std::vector<const PromptLayout*>& rows, const PromptLayout& empty,
                                              size_t chunks) {
  std::vector<const PromptChunk*> all;  // row-major: rows × chunks
  for (const PromptLayout* r : rows)
    for (size_t c = 0; c < chunks; ++c) all.push_back(c < r->chunks.size() ? &r->chunks[c] : &empty.chunks[0]);
  return all;
}

Tensor embed_chunks(const ClipTextModel& encoder, const std::vector<const PromptChunk*>& chunks,
                    std::vector<int32_t>* ids) {
  constexpr int64_t kL = kChunkTokens + 2;
  const int64_t N = static_cast<int64_t>(chunks.size()), H = encoder.config().hidden_size;
  ids->clear();
  for (const PromptChunk* c : chunks) ids->insert(ids->end(), c->ids.begin(), c->ids.end());
  Tensor embeds = encoder.embed_tokens(*ids, N, kL);
  for (int64_t n = 0; n < N; ++n)
    for (const PromptChunk::Fix& fix : chunks[n]->fixes)
      std::memcpy(embeds.data() + (n * kL + fix.position) * H, fix.vectors.data(), sizeof(float) * fix.vectors.numel());
  return embeds;
}

void apply_chunk_weights(Tensor& z, const std::vector<const PromptChunk*>& chunks) {
  const int64_t L = z.dim(1), H = z.dim(2);
  for (size_t n = 0; n < chunks.size(); ++n)
    apply_weights_restoring_mean(z.data() + static_cast<int64_t>(n) * L * H, chunks[n]->multipliers, H);
}

std::string chunk_key(const PromptChunk& chunk, int skipped_layers) {
  std::vector<std::pair<int, const Tensor*>> fixes;
  for (const PromptChunk::Fix& fix : chunk.fixes) fixes.emplace_back(fix.position, &fix.vectors);
  return text_row_key(chunk.ids.data(), chunk.ids.size(), fixes, skipped_layers);
}

Tensor encode_prompt_layouts(const ClipTextModel& encoder, const std::vector<const PromptLayout*>& rows,
                             const PromptLayout& empty, TextEncodingCache* cache, int skipped_layers) {
  constexpr int64_t kL = kChunkTokens + 2;
  const size_t chunks = most_chunks(rows);
  const std::vector<const PromptChunk*> all = padded_chunks(rows, empty, chunks);
  auto encode = [&](const std::vector<size_t>& which) {  // N × 77 × H, before the weights
    std::vector<const PromptChunk*> some;
    for (size_t i : which) some.push_back(all[i]);
    std::vector<int32_t> ids;
    return encoder.forward_embeddings(embed_chunks(encoder, some, &ids), skipped_layers).last_hidden_state;
  };
  Tensor z;
  if (cache) {
    std::vector<std::string> keys;
    for (const PromptChunk* c : all) keys.push_back(chunk_key(*c, skipped_layers));
    z = cache->rows(keys, encode);
  } else {
    std::vector<size_t> every(all.size());
    for (size_t i = 0; i < all.size(); ++i) every[i] = i;
    z = encode(every);
  }
  apply_chunk_weights(z, all);
  // rows × (chunks·77) × H is the same memory as (rows·chunks) × 77 × H.
  return z.reshaped({static_cast<int64_t>(rows.size()), static_cast<int64_t>(chunks) * kL,
                     static_cast<int64_t>(encoder.config().hidden_size)});
}

}  // namespace octodiff
