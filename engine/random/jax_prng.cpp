// JAX's threefry2x32 PRNG; see jax_prng.h and shared/spec/jax-prng.md (section numbers below).
//
// Compiled with -ffp-contract=off (engine/CMakeLists.txt): every float operation here rounds
// exactly as written, and the fused multiply-adds XLA produces are spelled std::fma.
#include "random/jax_prng.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/parallel.h"

namespace octodiff::jax {
namespace {

// --- Threefry-2x32, 20 rounds (§2) --------------------------------------------------------

inline uint32_t rotl(uint32_t v, int r) {
  return (v << r) | (v >> (32 - r));
}

inline void rounds(uint32_t& x0, uint32_t& x1, const int (&r)[4]) {
  for (int i = 0; i < 4; ++i) {
    x0 += x1;
    x1 = rotl(x1, r[i]);
    x1 ^= x0;
  }
}

inline std::array<uint32_t, 2> block(Key key, uint32_t x0, uint32_t x1) {
  static constexpr int kR0[4] = {13, 15, 26, 6};
  static constexpr int kR1[4] = {17, 29, 16, 24};
  const uint32_t ks[3] = {key.k0, key.k1, key.k0 ^ key.k1 ^ 0x1BD11BDAu};
  x0 += ks[0];
  x1 += ks[1];
  for (uint32_t g = 0; g < 5; ++g) {
    rounds(x0, x1, g % 2 == 0 ? kR0 : kR1);
    x0 += ks[(g + 1) % 3];
    x1 += ks[(g + 2) % 3] + (g + 1);
  }
  return {x0, x1};
}

// --- The two counter layouts (§4) ---------------------------------------------------------
//
// Work is done in blocks (one threefry call each), so ranges of blocks can go to threads.

// JAX falls back to splitting the key beyond this many words; no image needs that many.
constexpr int64_t kMaxClassicWords = int64_t{0xFFFFFFFF} - 1;

void check_classic_words(int64_t words) {
  if (words > kMaxClassicWords) {
    fail("the classic JAX random scheme supports at most ", kMaxClassicWords,
         " 32-bit words per call (asked for ", words, ")");
  }
}

// Classic: the words of H(key, [0, 1, ..., words-1]). Block j hashes counter (j, j + half)
// and gives word j and word j + half; with an odd count the last block's second counter is the
// zero pad and its second output is dropped. emit(index, word).
int64_t classic_blocks(int64_t words) {
  return (words + 1) / 2;
}

template <typename Emit>
void classic_words(Key key, int64_t words, int64_t begin, int64_t end, Emit&& emit) {
  const int64_t half = classic_blocks(words);
  for (int64_t j = begin; j < end; ++j) {
    const int64_t second = j + half;
    const bool padded = second >= words;
    const auto y = block(key, static_cast<uint32_t>(j), padded ? 0u : static_cast<uint32_t>(second));
    emit(j, y[0]);
    if (!padded) emit(second, y[1]);
  }
}

// Partitionable: element j uses counter (j >> 32, j & 0xFFFFFFFF). emit(index, y0, y1).
template <typename Emit>
void partitionable_blocks(Key key, int64_t begin, int64_t end, Emit&& emit) {
  for (int64_t j = begin; j < end; ++j) {
    const uint64_t c = static_cast<uint64_t>(j);
    const auto y = block(key, static_cast<uint32_t>(c >> 32), static_cast<uint32_t>(c));
    emit(j, y[0], y[1]);
  }
}

// The 32-bit random words behind bits32/uniform/normal (§6), in blocks.
int64_t bits32_blocks(int64_t n, RngScheme scheme) {
  if (scheme == RngScheme::Classic) {
    check_classic_words(n);
    return classic_blocks(n);
  }
  return n;
}

template <typename Emit>
void bits32(Key key, int64_t n, RngScheme scheme, int64_t begin, int64_t end, Emit&& emit) {
  if (scheme == RngScheme::Classic) {
    classic_words(key, n, begin, end, emit);
  } else {
    partitionable_blocks(key, begin, end, [&](int64_t j, uint32_t y0, uint32_t y1) { emit(j, y0 ^ y1); });
  }
}

void check_count(int64_t n, const char* what) {
  if (n < 0) fail("jax.random.", what, ": element count must not be negative (got ", n, ")");
}

// --- Float transforms (§7, §8) ------------------------------------------------------------

// The top 23 bits as a float in [0, 1 - 2^-23]; exact.
inline float unit_float(uint32_t bits) {
  return std::bit_cast<float>((bits >> 9) | 0x3F800000u) - 1.0f;
}

// max(lo, f * span + lo): one FMA on XLA:CPU/GPU, two roundings in the strict variant.
template <bool Fused>
inline float scale_shift(float f, float span, float lo) {
  const float v = Fused ? std::fma(f, span, lo) : f * span + lo;
  return std::max(lo, v);
}

constexpr float f32(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

// Giles' single-precision erfinv polynomials, by bit pattern (§8 table).
constexpr float kErfInvLt5[9] = {f32(0x32F16588), f32(0x34B84B36), f32(0xB66C7357),
                                 f32(0xB6935AC1), f32(0x396532DB), f32(0xBAA45408),
                                 f32(0xBB88E4EF), f32(0x3E7C8F63), f32(0x3FC02E2F)};
constexpr float kErfInvGe5[9] = {f32(0xB951F09B), f32(0x38D3B56B), f32(0x3AB0DC72),
                                 f32(0xBB70BDE7), f32(0x3BBC127B), f32(0xBBF9C5D7),
                                 f32(0x3C1AA57E), f32(0x3F8036DB), f32(0x40354F7E)};
constexpr float kSqrt2 = f32(0x3FB504F3);

// chlo.erf_inv as XLA decomposes it for float32.
template <bool Fused>
inline float erfinv_f32(float x) {
  // log1p correctly rounded to float32: double log1p of an exact float input, one rounding.
  const float w = -static_cast<float>(std::log1p(static_cast<double>(x * -x)));
  const float* c = kErfInvLt5;
  float t = w - 2.5f;
  if (!(w < 5.0f)) {
    c = kErfInvGe5;
    t = std::sqrt(w) - 3.0f;
  }
  float p = c[0];
  for (int i = 1; i < 9; ++i) p = Fused ? std::fma(p, t, c[i]) : c[i] + p * t;
  float r = p * x;
  if (std::fabs(x) == 1.0f) r = x * std::numeric_limits<float>::infinity();
  return r;
}

// normal's uniform bounds: lo = nextafter(-1, 0); span = 1 - lo rounds to 2.
constexpr float kNormalLo = f32(0xBF7FFFFF);
constexpr float kNormalSpan = 1.0f - kNormalLo;
static_assert(kNormalSpan == 2.0f);

template <bool Fused>
inline float normal_from_bits(uint32_t bits) {
  const float u = scale_shift<Fused>(unit_float(bits), kNormalSpan, kNormalLo);
  return kSqrt2 * erfinv_f32<Fused>(u);
}

template <bool Fused>
std::vector<float> uniform_impl(Key key, int64_t n, float minval, float maxval, RngScheme scheme) {
  check_count(n, "uniform");
  const float span = maxval - minval;
  std::vector<float> out(static_cast<size_t>(n));
  bits32(key, n, scheme, 0, bits32_blocks(n, scheme), [&](int64_t i, uint32_t word) {
    out[static_cast<size_t>(i)] = scale_shift<Fused>(unit_float(word), span, minval);
  });
  return out;
}

template <bool Fused>
void normal_impl(Key key, int64_t n, RngScheme scheme, float* out) {
  check_count(n, "normal");
  const int64_t blocks = bits32_blocks(n, scheme);
  // Each element's value depends only on its own counter, so any split of the blocks over
  // threads gives identical results.
  parallel_for(
      blocks,
      [&](int64_t begin, int64_t end) {
        bits32(key, n, scheme, begin, end,
               [&](int64_t i, uint32_t word) { out[i] = normal_from_bits<Fused>(word); });
      },
      4096);
}

}  // namespace

RngScheme parse_rng_scheme(const std::string& name) {
  if (name == "classic") return RngScheme::Classic;
  if (name == "partitionable") return RngScheme::Partitionable;
  fail("unknown JAX random scheme '", name,
       "': use 'classic' (JAX before 0.5, jax_threefry_partitionable=False) or 'partitionable' "
       "(JAX 0.5 and later)");
}

std::string rng_scheme_name(RngScheme scheme) {
  return scheme == RngScheme::Classic ? "classic" : "partitionable";
}

Key prng_key(int64_t seed, bool x64) {
  const uint64_t bits = static_cast<uint64_t>(seed);
  // x32: the seed is canonicalised to int32 (wrapping) and a 32-bit logical shift by 32 is 0.
  return Key{x64 ? static_cast<uint32_t>(bits >> 32) : 0u, static_cast<uint32_t>(bits)};
}

std::array<uint32_t, 2> threefry2x32(Key key, uint32_t x0, uint32_t x1) {
  return block(key, x0, x1);
}

std::vector<uint32_t> threefry_2x32_counts(Key key, const std::vector<uint32_t>& counts) {
  const int64_t m = static_cast<int64_t>(counts.size());
  const int64_t half = (m + 1) / 2;
  std::vector<uint32_t> out(counts.size());
  for (int64_t j = 0; j < half; ++j) {
    const bool padded = j + half >= m;
    const auto y = block(key, counts[j], padded ? 0u : counts[j + half]);
    out[j] = y[0];
    if (!padded) out[j + half] = y[1];
  }
  return out;
}

std::vector<Key> split(Key key, int64_t n, RngScheme scheme) {
  check_count(n, "split");
  std::vector<Key> keys(static_cast<size_t>(n));
  if (scheme == RngScheme::Classic) {
    // H(key, [0, 2n)); key i = (word 2i, word 2i+1).
    check_classic_words(2 * n);
    classic_words(key, 2 * n, 0, classic_blocks(2 * n), [&](int64_t w, uint32_t word) {
      Key& k = keys[static_cast<size_t>(w / 2)];
      (w % 2 == 0 ? k.k0 : k.k1) = word;
    });
  } else {
    partitionable_blocks(key, 0, n, [&](int64_t j, uint32_t y0, uint32_t y1) {
      keys[static_cast<size_t>(j)] = Key{y0, y1};
    });
  }
  return keys;
}

Key fold_in(Key key, uint32_t data) {
  const auto y = block(key, 0, data);
  return Key{y[0], y[1]};
}

std::vector<uint64_t> random_bits(Key key, int64_t n, int bit_width, RngScheme scheme) {
  check_count(n, "bits");
  if (bit_width != 8 && bit_width != 16 && bit_width != 32 && bit_width != 64) {
    fail("jax.random.bits: bit width must be 8, 16, 32 or 64 (got ", bit_width, ")");
  }
  std::vector<uint64_t> out(static_cast<size_t>(n));
  if (scheme == RngScheme::Partitionable) {
    const uint64_t mask = bit_width == 64 ? ~uint64_t{0} : (uint64_t{1} << bit_width) - 1;
    partitionable_blocks(key, 0, n, [&](int64_t j, uint32_t y0, uint32_t y1) {
      out[static_cast<size_t>(j)] = bit_width == 64 ? (uint64_t{y0} << 32) | y1 : uint64_t{y0 ^ y1} & mask;
    });
    return out;
  }
  // Classic: ceil(bit_width * n / 32) words of H(key, iota), then viewed as the wanted type.
  if (n > std::numeric_limits<int64_t>::max() / 64) check_classic_words(n);  // no overflow below
  const int64_t words = (bit_width * n + 31) / 32;
  check_classic_words(words);
  std::vector<uint32_t> w(static_cast<size_t>(words));
  classic_words(key, words, 0, classic_blocks(words),
                [&](int64_t i, uint32_t word) { w[static_cast<size_t>(i)] = word; });
  for (int64_t i = 0; i < n; ++i) {
    switch (bit_width) {
      case 64:  // high word from the first half, low word from the second (§10.4)
        out[i] = (uint64_t{w[i]} << 32) | w[i + n];
        break;
      case 32:
        out[i] = w[i];
        break;
      default: {  // little-endian view of the words as bytes / halfwords
        const int per_word = 32 / bit_width;
        const int shift = static_cast<int>(i % per_word) * bit_width;
        out[i] = (w[i / per_word] >> shift) & ((uint32_t{1} << bit_width) - 1);
      }
    }
  }
  return out;
}

std::vector<float> uniform(Key key, int64_t n, float minval, float maxval, RngScheme scheme) {
  return uniform_impl<true>(key, n, minval, maxval, scheme);
}

std::vector<float> uniform_strict(Key key, int64_t n, float minval, float maxval, RngScheme scheme) {
  return uniform_impl<false>(key, n, minval, maxval, scheme);
}

void normal_into(Key key, int64_t n, RngScheme scheme, float* out) {
  normal_impl<true>(key, n, scheme, out);
}

std::vector<float> normal(Key key, int64_t n, RngScheme scheme) {
  check_count(n, "normal");
  std::vector<float> out(static_cast<size_t>(n));
  normal_impl<true>(key, n, scheme, out.data());
  return out;
}

std::vector<float> normal_strict(Key key, int64_t n, RngScheme scheme) {
  check_count(n, "normal");
  std::vector<float> out(static_cast<size_t>(n));
  normal_impl<false>(key, n, scheme, out.data());
  return out;
}

}  // namespace octodiff::jax
