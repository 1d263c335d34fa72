// CLIP's BPE tokenizer, as transformers' slow CLIPTokenizer (4.x) runs it for Stable Diffusion:
//
//   ids = [bos] + content[:max_length - 2] + [eos] + [pad] * ...   (max_length = 77)
//
// content ids, per piece of the prompt:
//  0. Special-token split of the raw text: every registered special token (bos, eos, unk, pad,
//     additional/added special tokens from the config files) becomes its id directly; the text
//     between them is processed separately. Note that with SD 2.x (pad_token "!") this makes a
//     literal "!" in the prompt the special token "!" (its vocab id), not BPE's "!</w>" — that
//     is what transformers does.
//  1. Clean-up (Cleanup::Ftfy, default):  whitespace_clean(fix_text(text)).lower(), where
//     fix_text is our subset of ftfy 6.3's default configuration, per line, repeated until
//     nothing changes (so "&amp;amp;" becomes "&", as ftfy does):
//       implemented —
//       - HTML entities, only while no line so far contained '<': &#NNN; &#xHH; (with Python
//         html.unescape's special cases) and ~150 named entities: the Latin-1 set (&eacute;
//         ...), &amp; &lt; &gt; &quot; &apos;, Windows-1252 punctuation (&hellip; &mdash;
//         &rsquo; &ldquo; &euro; &trade; ...), a few symbols, plus ftfy's ALL-CAPS spellings
//         of all-lowercase names (&EACUTE; -> É);
//       - mojibake: UTF-8 that was decoded as Windows-1252/Latin-1, repaired conservatively
//         (rule in mojibake.cpp): runs of characters whose cp1252 bytes form valid UTF-8 are
//         re-decoded only when unmistakable, e.g. "cafÃ©" -> "café", "â€™" -> "’",
//         "ðŸš€" -> "🚀", "Ð°Ð±" -> "аб"; ordinary text in any script never qualifies;
//       - C1 controls U+0080-U+009F -> their Windows-1252 characters (U+0085 -> "…");
//       - Latin ligatures (ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ, Ĳ ĳ, ŉ, Ǳ ǲ ǳ, Ǆ ǅ ǆ, Ǉ ǈ ǉ, Ǌ ǋ ǌ) expanded;
//       - full-width/half-width forms U+FF01-U+FFEF -> NFKC form, U+3000 -> space;
//       - curly quotes: U+02BC ‘ ’ ‚ ‛ -> ', “ ” „ ‟ -> ";
//       - line breaks \r\n \r U+2028 U+2029 -> \n; ANSI terminal escapes removed;
//       - control characters removed (U+0000-0008, 000B, 000E-001F, 007F, 206A-206F, FEFF,
//         FFF9-FFFC); NFC.
//       not implemented (the text is left as it is) —
//       - the other ~2000 HTML5 entity names;
//       - mojibake that ftfy only repairs with its full "badness" heuristic or context: a
//         lone ambiguous sequence (e.g. "Ã…" for Å, "Ä…" for ą, one CJK character), mojibake
//         through other code pages (Windows-1250/1251/1253/1254/1257, ISO-8859-2, MacRoman,
//         cp437), byte 0xA0 that became a space, sequences with lost bytes (U+FFFD). On text
//         that is mojibake through and through ftfy may also re-decode more (or, next to other
//         suspicious characters, less) than we do;
//       - fix_surrogates (cannot occur: input must be valid UTF-8).
//     Then whitespace_clean: every run of Python whitespace -> one space, trimmed; then Python's
//     str.lower() (full mapping, Final_Sigma).
//     Cleanup::Basic instead does what transformers does without ftfy: drop NUL, U+FFFD and
//     \p{C} (except \t \n \r), whitespace -> space, spaces around CJK ideographs, NFC, split on
//     whitespace, lower-case, join with single spaces.
//  2. CLIP's split regex (a hand-written scanner: see clip_pretokenizer.h), byte-level mapping,
//     BPE with "</w>" (results cached per piece), vocab lookup (unknown -> unk id). A piece that
//     is literally "<|startoftext|>" or "<|endoftext|>" maps to that token's id.
// Character properties come from ICU (Unicode 15 for ICU 72); Python's may be another version,
// which only matters for characters assigned in between.
//
// Thread safety: a ClipTokenizer may be used from several threads at once (the cache is
// guarded by a mutex). Copies share the loaded data and the cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace octodiff {

class ClipTokenizer {
 public:
  // Loads vocab.json + merges.txt (line 1 is a header) and, when present, tokenizer_config.json
  // and special_tokens_map.json (bos/eos/unk/pad tokens, model_max_length). Defaults when they
  // are absent: SD 1.x's ("<|startoftext|>", "<|endoftext|>" for eos/unk/pad, 77). Throws
  // octodiff::Error naming the file for anything missing or malformed.
  static ClipTokenizer from_folder(const std::filesystem::path& dir);

  enum class Cleanup { Ftfy, Basic };

  struct Encoding {
    std::vector<int32_t> ids;    // exactly max_length() ids
    int untruncated_length = 0;  // content + bos + eos, before truncation
    bool truncated = false;
  };

  // Invalid UTF-8 is an octodiff::Error giving the byte offset.
  Encoding encode(std::string_view utf8, Cleanup cleanup = Cleanup::Ftfy) const;
  // Content ids only: no bos/eos, no truncation, no padding.
  std::vector<int32_t> tokenize(std::string_view utf8, Cleanup cleanup = Cleanup::Ftfy) const;

  int bos_id() const;
  int eos_id() const;
  int unk_id() const;
  int pad_id() const;
  int max_length() const;
  size_t vocab_size() const;

  struct Impl;

 private:
  explicit ClipTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace octodiff
