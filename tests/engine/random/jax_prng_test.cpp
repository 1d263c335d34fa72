// Every vector of tests/data/jax-prng/vectors.json, in both JAX random schemes.
//
// Floats are compared by bit pattern (the vectors' f32_bits are authoritative). Each group prints
// one summary line with the number of vectors it checked; a group with no vectors fails.
#include "random/jax_prng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/sha256.h"
#include "test_support.h"

using namespace octodiff;
using namespace octodiff::jax;
using json = nlohmann::json;

namespace octodiff::jax {
// Readable test names in GoogleTest's output.
void PrintTo(RngScheme scheme, std::ostream* out) {
  *out << rng_scheme_name(scheme);
}
}  // namespace octodiff::jax

namespace {

const json& vectors() {
  static const json v = [] {
    std::ifstream in(test::data_dir() / "jax-prng" / "vectors.json");
    if (!in) throw Error("tests/data/jax-prng/vectors.json is missing");
    return json::parse(in);
  }();
  return v;
}

Key key_of(const json& j) {
  return Key{j.at(0).get<uint32_t>(), j.at(1).get<uint32_t>()};
}

int64_t numel(const json& shape) {
  int64_t n = 1;
  for (const auto& d : shape) n *= d.get<int64_t>();
  return n;
}

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}

float float_of(const json& decimal) {
  return std::strtof(decimal.get<std::string>().c_str(), nullptr);
}

std::string sha256_f32le(const std::vector<float>& v) {
  static_assert(std::endian::native == std::endian::little);
  return sha256_hex(v.data(), v.size() * sizeof(float));
}

// The correctly rounded float64 sum of `values` (Shewchuk's exact partials, finished with the
// round-half-even correction — the algorithm of Python's math.fsum, which made the vectors).
// Every float32 and every square of a float32 is exact in double, so the result must equal the
// vectors' "sum"/"sum_sq" bit for bit: we compare with ==, not with a tolerance.
double exact_sum(const std::vector<double>& values) {
  std::vector<double> partials;
  for (double x : values) {
    size_t i = 0;
    for (double y : partials) {
      if (std::fabs(x) < std::fabs(y)) std::swap(x, y);
      const double hi = x + y;
      const double lo = y - (hi - x);
      if (lo != 0.0) partials[i++] = lo;
      x = hi;
    }
    partials.resize(i);
    partials.push_back(x);
  }
  size_t n = partials.size();
  double hi = 0.0;
  if (n > 0) {
    hi = partials[--n];
    double lo = 0.0;
    while (n > 0) {
      const double x = hi;
      const double y = partials[--n];
      hi = x + y;
      lo = y - (hi - x);
      if (lo != 0.0) break;
    }
    // hi + lo is a tie only if the remaining partials push it one way: round half to even.
    if (n > 0 && ((lo < 0 && partials[n - 1] < 0) || (lo > 0 && partials[n - 1] > 0))) {
      const double y = lo * 2;
      const double x = hi + y;
      if (y == x - hi) hi = x;
    }
  }
  return hi;
}

void summary(RngScheme scheme, const char* group, int vectors, const std::string& detail = "") {
  std::printf("[jax-prng %-13s] %-32s %3d vectors checked%s%s\n", rng_scheme_name(scheme).c_str(), group,
              vectors, detail.empty() ? "" : ": ", detail.c_str());
  EXPECT_GT(vectors, 0) << group << " has no vectors";
}

class JaxPrng : public ::testing::TestWithParam<RngScheme> {
 protected:
  RngScheme scheme() const { return GetParam(); }
  const json& mode() const { return vectors().at("modes").at(rng_scheme_name(scheme())); }
  // Groups are either a list or an object with "cases".
  const json& cases(const char* group) const {
    const json& g = mode().at(group);
    return g.is_array() ? g : g.at("cases");
  }
};

INSTANTIATE_TEST_SUITE_P(Schemes, JaxPrng, ::testing::Values(RngScheme::Classic, RngScheme::Partitionable),
                         [](const auto& info) { return rng_scheme_name(info.param); });

TEST_P(JaxPrng, ModeFlag) {
  EXPECT_EQ(mode().at("jax_threefry_partitionable").get<bool>(), scheme() == RngScheme::Partitionable);
}

TEST_P(JaxPrng, Threefry2x32KnownAnswers) {
  int n = 0;
  for (const auto& c : cases("threefry2x32_kats")) {
    const auto out = threefry2x32(key_of(c["key"]), c["counter"][0], c["counter"][1]);
    EXPECT_EQ(out[0], c["out"][0].get<uint32_t>()) << c.dump();
    EXPECT_EQ(out[1], c["out"][1].get<uint32_t>()) << c.dump();
    ++n;
  }
  summary(scheme(), "threefry2x32 KATs", n);
}

TEST_P(JaxPrng, CountArrayLayout) {
  int n = 0;
  for (const auto& c : cases("threefry_2x32_count_array_layout")) {
    const auto out = threefry_2x32_counts(key_of(c["key"]), c["counts"].get<std::vector<uint32_t>>());
    EXPECT_EQ(out, c["out"].get<std::vector<uint32_t>>()) << c.dump();
    ++n;
  }
  summary(scheme(), "count-array hash layout", n);
}

TEST_P(JaxPrng, PrngKey) {
  int n = 0;
  for (const auto& c : cases("prng_key")) {
    const int64_t seed = c["seed"].get<int64_t>();
    EXPECT_EQ(prng_key(seed), key_of(c["key_x32"])) << "x32 seed " << seed;
    EXPECT_EQ(prng_key(seed, /*x64=*/true), key_of(c["key_x64"])) << "x64 seed " << seed;
    n += 2;
  }
  summary(scheme(), "prng_key (x32 + x64)", n);
}

TEST_P(JaxPrng, Split) {
  int n = 0;
  for (const auto& c : cases("split")) {
    const auto keys = split(key_of(c["key"]), c["num"].get<int64_t>(), scheme());
    ASSERT_EQ(keys.size(), c["out"].size()) << c["key_desc"];
    for (size_t i = 0; i < keys.size(); ++i)
      EXPECT_EQ(keys[i], key_of(c["out"][i])) << c["key_desc"] << " #" << i;
    ++n;
  }
  summary(scheme(), "split", n);

  int shaped = 0;
  for (const auto& c : cases("split_shape")) {
    // split(key, shape) is the row-major fill of prod(shape) keys.
    const auto keys = split(key_of(c["key"]), numel(c["shape"]), scheme());
    std::vector<Key> expected;
    for (const auto& row : c["out"]) {
      for (const auto& k : row) expected.push_back(key_of(k));
    }
    EXPECT_EQ(keys, expected) << c["key_desc"];
    ++shaped;
  }
  summary(scheme(), "split with a shape", shaped);
}

// A rule of the spec (§5), not a vector: partitionable split(key, n)[i] == fold_in(key, i) for
// any n; classic split keys are not fold_in keys.
TEST_P(JaxPrng, SplitVersusFoldIn) {
  const Key key = prng_key(72);
  const auto keys = split(key, 3, scheme());
  const bool partitionable = scheme() == RngScheme::Partitionable;
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(keys[i] == fold_in(key, i), partitionable) << i;
  EXPECT_EQ(split(key, 8, scheme())[1] == keys[1], partitionable);
}

TEST_P(JaxPrng, FoldIn) {
  int n = 0;
  for (const auto& c : cases("fold_in")) {
    EXPECT_EQ(fold_in(key_of(c["key"]), c["data"].get<uint32_t>()), key_of(c["out"])) << c.dump();
    ++n;
  }
  summary(scheme(), "fold_in", n);
}

TEST_P(JaxPrng, RandomBits) {
  int counts[65] = {};
  for (const auto& c : cases("random_bits")) {
    const int width = c["bit_width"].get<int>();
    const auto bits = random_bits(key_of(c["key"]), numel(c["shape"]), width, scheme());
    std::vector<uint64_t> expected;
    for (const auto& v : c["values"]) {
      expected.push_back(width == 64 ? std::stoull(v.get<std::string>()) : v.get<uint64_t>());
    }
    EXPECT_EQ(bits, expected) << c["key_desc"] << " uint" << width << " shape " << c["shape"].dump();
    ++counts[width];
  }
  const int total = counts[8] + counts[16] + counts[32] + counts[64];
  summary(scheme(), "random_bits", total,
          cat(counts[8], "x uint8, ", counts[16], "x uint16, ", counts[32], "x uint32, ", counts[64],
              "x uint64"));
  EXPECT_GT(counts[8] * counts[16] * counts[32] * counts[64], 0);
}

// Checks `strict` against `primary` where the vector lists the no-FMA differences
// ([index, bits, value]); returns how many differences there were.
int check_strict(const std::vector<float>& primary, const std::vector<float>& strict, const json& c) {
  std::vector<uint32_t> expected(primary.size());
  for (size_t i = 0; i < primary.size(); ++i) expected[i] = bits_of(primary[i]);
  int diffs = 0;
  if (c.contains("nofma_diffs")) {
    for (const auto& d : c["nofma_diffs"]) {
      expected.at(d[0].get<size_t>()) = d[1].get<uint32_t>();
      ++diffs;
    }
  }
  for (size_t i = 0; i < strict.size(); ++i) {
    EXPECT_EQ(bits_of(strict[i]), expected[i])
        << "strict evaluation, element " << i << " of " << c["key_desc"];
  }
  return diffs;
}

TEST_P(JaxPrng, Uniform) {
  int n = 0, strict_diffs = 0;
  for (const auto& c : cases("uniform")) {
    const Key key = key_of(c["key"]);
    const int64_t count = numel(c["shape"]);
    const float lo = c["minval"].get<float>(), hi = c["maxval"].get<float>();
    const auto u = uniform(key, count, lo, hi, scheme());
    const auto expected = c["f32_bits"].get<std::vector<uint32_t>>();
    ASSERT_EQ(u.size(), expected.size());
    for (size_t i = 0; i < u.size(); ++i) {
      EXPECT_EQ(bits_of(u[i]), expected[i]) << c["key_desc"] << " [" << lo << ", " << hi << ") element " << i;
    }
    strict_diffs += check_strict(u, uniform_strict(key, count, lo, hi, scheme()), c);
    ++n;
  }
  summary(scheme(), "uniform (f32 bits)", n,
          cat("strict no-FMA variant differs in ", strict_diffs, " elements, all as listed"));
}

TEST_P(JaxPrng, Normal) {
  int n = 0, strict_diffs = 0;
  for (const auto& c : cases("normal")) {
    const Key key = key_of(c["key"]);
    const int64_t count = numel(c["shape"]);
    const auto z = normal(key, count, scheme());
    const auto expected = c["f32_bits"].get<std::vector<uint32_t>>();
    ASSERT_EQ(z.size(), expected.size());
    for (size_t i = 0; i < z.size(); ++i) {
      EXPECT_EQ(bits_of(z[i]), expected[i])
          << c["key_desc"] << " shape " << c["shape"].dump() << " element " << i;
    }
    strict_diffs += check_strict(z, normal_strict(key, count, scheme()), c);
    ++n;
  }
  summary(scheme(), "normal (f32 bits)", n,
          cat("strict no-FMA variant differs in ", strict_diffs, " elements, all as listed"));
}

// diffusers' FlaxStableDiffusionPipeline: keys = split(PRNGKey(seed), 8); latents[d] =
// normal(keys[d], (1, 4, 64, 64)).
TEST_P(JaxPrng, DiffusersLatents) {
  int devices_checked = 0, seeds = 0;
  for (const auto& c : cases("diffusers_latents")) {
    const int64_t seed = c["seed"].get<int64_t>();
    const Key root = prng_key(seed);
    EXPECT_EQ(root, key_of(c["root_key"]));
    EXPECT_EQ(prng_key(seed, /*x64=*/true), root);
    const auto keys = split(root, c["num_devices"].get<int64_t>(), scheme());
    ASSERT_EQ(keys.size(), c["device_keys"].size());
    for (size_t d = 0; d < keys.size(); ++d)
      EXPECT_EQ(keys[d], key_of(c["device_keys"][d])) << "device " << d;

    const int64_t count = numel(c["shape_per_device"]);
    Sha256 all_devices;
    for (const auto& dev : c["devices"]) {
      const size_t d = dev["device"].get<size_t>();
      const std::string where = cat("seed ", seed, " device ", d);
      ASSERT_LT(d, keys.size());
      EXPECT_EQ(keys[d], key_of(dev["key"])) << where;
      const auto z = normal(keys[d], count, scheme());
      all_devices.update(z.data(), z.size() * sizeof(float));

      const auto first16 = dev["first16_bits"].get<std::vector<uint32_t>>();
      for (size_t i = 0; i < first16.size(); ++i) EXPECT_EQ(bits_of(z[i]), first16[i]) << where << " #" << i;

      std::vector<double> values(z.begin(), z.end()), squares;
      for (float v : z) squares.push_back(static_cast<double>(v) * static_cast<double>(v));
      EXPECT_EQ(exact_sum(values), dev["sum"].get<double>()) << where;
      EXPECT_EQ(exact_sum(squares), dev["sum_sq"].get<double>()) << where;
      EXPECT_EQ(*std::min_element(z.begin(), z.end()), float_of(dev["min"])) << where;
      EXPECT_EQ(*std::max_element(z.begin(), z.end()), float_of(dev["max"])) << where;
      EXPECT_EQ(sha256_f32le(z), dev["sha256_f32le"].get<std::string>()) << where;

      // The strict (no-FMA) evaluation: number of differing elements, digest and sum.
      const auto strict = normal_strict(keys[d], count, scheme());
      int64_t n_diff = 0;
      for (int64_t i = 0; i < count; ++i) n_diff += bits_of(strict[i]) != bits_of(z[i]);
      const json& nofma = dev["nofma"];
      EXPECT_EQ(n_diff, nofma["n_diff"].get<int64_t>()) << where;
      EXPECT_EQ(sha256_f32le(strict), nofma["sha256_f32le"].get<std::string>()) << where;
      EXPECT_EQ(exact_sum(std::vector<double>(strict.begin(), strict.end())), nofma["sum"].get<double>())
          << where;
      ++devices_checked;
    }
    EXPECT_EQ(all_devices.hex_digest(), c["sha256_all_devices_f32le"].get<std::string>()) << "seed " << seed;
    ++seeds;
  }
  summary(scheme(), "diffusers latents (1,4,64,64)", devices_checked,
          cat(seeds,
              " seeds x 8 devices: keys, first 16 bits, exact fsum sum/sum_sq (==), min/max, "
              "sha256, no-FMA n_diff/sha256/sum; plus all-device sha256"));
}

// normal() is parallel over blocks of counters: any thread count gives the same bits, including
// odd sizes where the classic layout pads one counter.
TEST_P(JaxPrng, NormalIsIndependentOfThreadCount) {
  const Key key = prng_key(1234);
  for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{3 * 16384 + 1}}) {
    std::vector<float> reference;
    {
      DeviceContext ctx;
      ctx.threads = 1;
      DeviceScope scope(ctx);
      reference = normal(key, n, scheme());
    }
    for (int threads : {2, 3, 8}) {
      DeviceContext ctx;
      ctx.threads = threads;
      DeviceScope scope(ctx);
      const auto z = normal(key, n, scheme());
      ASSERT_EQ(z.size(), reference.size());
      EXPECT_EQ(0, std::memcmp(z.data(), reference.data(), z.size() * sizeof(float)))
          << n << " elements on " << threads << " threads";
    }
    // normal_into writes the same values.
    std::vector<float> into(static_cast<size_t>(n), 0.0f);
    normal_into(key, n, scheme(), into.data());
    EXPECT_EQ(0, std::memcmp(into.data(), reference.data(), into.size() * sizeof(float)));
  }
}

// Classic mode pads odd counts and halves the counter array over the whole size, so the first
// element depends on n; partitionable fills are prefixes of each other (spec §9).
TEST_P(JaxPrng, PrefixPropertyOnlyInPartitionable) {
  const Key key = prng_key(0);
  const auto small = normal(key, 16384, scheme());
  const auto large = normal(key, 2 * 16384, scheme());
  const bool prefix = std::memcmp(small.data(), large.data(), small.size() * sizeof(float)) == 0;
  EXPECT_EQ(prefix, scheme() == RngScheme::Partitionable);
}

TEST_P(JaxPrng, RejectsBadArguments) {
  EXPECT_THROW(normal(Key{}, -1, scheme()), Error);
  EXPECT_THROW(split(Key{}, -2, scheme()), Error);
  EXPECT_THROW(random_bits(Key{}, 4, 12, scheme()), Error);
  EXPECT_TRUE(normal(Key{}, 0, scheme()).empty());
}

}  // namespace

TEST(JaxPrngScheme, ParseAndName) {
  EXPECT_EQ(parse_rng_scheme("classic"), RngScheme::Classic);
  EXPECT_EQ(parse_rng_scheme("partitionable"), RngScheme::Partitionable);
  EXPECT_EQ(rng_scheme_name(RngScheme::Classic), "classic");
  EXPECT_EQ(rng_scheme_name(RngScheme::Partitionable), "partitionable");
  EXPECT_THROW(parse_rng_scheme("Classic "), Error);
  try {
    parse_rng_scheme("threefry");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("threefry"), std::string::npos) << msg;
    EXPECT_NE(msg.find("partitionable"), std::string::npos) << msg;
  }
}
