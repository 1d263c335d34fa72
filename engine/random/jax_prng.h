// JAX's default PRNG (threefry2x32), bit for bit, as used by diffusers' Flax pipelines.
//
// An integer seed must give the same initial latents as
//   keys = jax.random.split(jax.random.PRNGKey(seed), num_devices)
//   latents[d] = jax.random.normal(keys[d], shape, jnp.float32)
// Algorithm and evidence: shared/spec/jax-prng.md. Two things matter beyond the hash:
//  * the counter layout (RngScheme) — JAX changed its default in 0.5.0, and the same seed gives
//    entirely different numbers in the two schemes;
//  * float rounding in normal(): fused multiply-adds exactly where XLA:CPU/GPU fuse them, a
//    correctly rounded log1p, and nothing else fused (jax_prng.cpp is compiled with
//    -ffp-contract=off for that reason).
//
// Arrays are flat: an n-element result is the row-major fill of any shape with n elements.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace octodiff::jax {

// How random bits and split keys are laid out over threefry counters.
enum class RngScheme {
  Classic,        // jax_threefry_partitionable=False: the default of every JAX before 0.5.0
  Partitionable,  // jax_threefry_partitionable=True: the default since JAX 0.5.0 (2025)
};

// "classic" / "partitionable"; anything else is an octodiff::Error naming the valid choices.
RngScheme parse_rng_scheme(const std::string& name);
std::string rng_scheme_name(RngScheme scheme);

// jax.random.key_data(key): two uint32 words.
struct Key {
  uint32_t k0 = 0;
  uint32_t k1 = 0;
  friend bool operator==(const Key&, const Key&) = default;
};

// jax.random.PRNGKey(seed) for a Python int seed (outside jit). With x64 off (JAX's default)
// the seed wraps to 32 bits and k0 is 0; with jax_enable_x64 the high word is kept.
Key prng_key(int64_t seed, bool x64 = false);

// The Threefry-2x32 block function (20 rounds) at counter (x0, x1).
std::array<uint32_t, 2> threefry2x32(Key key, uint32_t x0, uint32_t x1);

// JAX's classic "count array" hash threefry_2x32(key, counts): pairs the first half of `counts`
// with the second half (odd length padded with one 0) and returns all first outputs, then all
// second outputs (the pad's output dropped).
std::vector<uint32_t> threefry_2x32_counts(Key key, const std::vector<uint32_t>& counts);

// jax.random.split(key, n) (also the row-major flattening of split(key, shape)).
std::vector<Key> split(Key key, int64_t n, RngScheme scheme);

// jax.random.fold_in(key, data); the same in both schemes.
Key fold_in(Key key, uint32_t data);

// jax.random.bits(key, (n,), uint<bit_width>) for bit_width 8, 16, 32 or 64, widened to uint64.
std::vector<uint64_t> random_bits(Key key, int64_t n, int bit_width, RngScheme scheme);

// jax.random.uniform(key, (n,), float32, minval, maxval).
std::vector<float> uniform(Key key, int64_t n, float minval, float maxval, RngScheme scheme);

// jax.random.normal(key, shape, float32) for a shape of n elements, as XLA:CPU/GPU evaluate it.
// Parallel over the current device's threads; the result does not depend on the thread count.
std::vector<float> normal(Key key, int64_t n, RngScheme scheme);
// The same, written to out[0..n) (e.g. straight into a latent tensor).
void normal_into(Key key, int64_t n, RngScheme scheme, float* out);

// Reference variants with no fused multiply-add at all (every * and + rounded separately), as
// some non-XLA backends evaluate the same graph. Not for the product: the test vectors list
// where this evaluation differs, and checking it proves the FMAs above are really fused.
std::vector<float> uniform_strict(Key key, int64_t n, float minval, float maxval, RngScheme scheme);
std::vector<float> normal_strict(Key key, int64_t n, RngScheme scheme);

}  // namespace octodiff::jax
