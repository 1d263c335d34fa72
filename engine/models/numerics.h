// Numerics flavour: the two ways the same Stable Diffusion weights are computed in practice.
//
//   Diffusers — as the PyTorch checkpoints were trained and as diffusers/transformers compute
//               them: exact-erf GELU in the UNet's GEGLU, Transformer2D GroupNorm eps 1e-6.
//   Flax      — as diffusers' Flax port computes them: tanh-approximate GELU in GEGLU,
//               Transformer2D GroupNorm eps 1e-5 (spec/models.md §2.6).
// Everything else is identical; the CLIP text encoder is the same in both.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/activations.h"

namespace octodiff {

enum class Flavour { Diffusers, Flax };

Flavour parse_flavour(const std::string& name);  // "diffusers" | "flax"
std::string flavour_name(Flavour f);

struct Numerics {
  Flavour flavour = Flavour::Diffusers;
  kernels::Gelu geglu_gelu() const { return flavour == Flavour::Flax ? kernels::Gelu::Tanh : kernels::Gelu::Erf; }
  float transformer_norm_eps() const { return flavour == Flavour::Flax ? 1e-5f : 1e-6f; }
  // Not a numerics choice — a memory one: the transformer MLP runs this many tokens at a time
  // (0 = all at once). Results are bit-identical for every value; tests check that.
  int64_t mlp_rows_per_block = 1024;
};

}  // namespace octodiff
