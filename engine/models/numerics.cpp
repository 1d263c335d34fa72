#include "models/numerics.h"

#include "core/error.h"

namespace octodiff {

Flavour parse_flavour(const std::string& name) {
  if (name == "diffusers") return Flavour::Diffusers;
  if (name == "flax") return Flavour::Flax;
  fail("unknown numerics flavour '", name, "' (expected 'diffusers' or 'flax')");
}

std::string flavour_name(Flavour f) { return f == Flavour::Flax ? "flax" : "diffusers"; }

}  // namespace octodiff
