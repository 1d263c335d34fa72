// Flax ↔ PyTorch parameter names and layouts (declared in io/flax_msgpack.h).
#include <cctype>

#include "core/error.h"
#include "io/flax_msgpack.h"
#include "io/weight_source.h"

namespace octodiff {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, char sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(1, sep) : std::string()) + parts[i];
  return out;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// diffusers' Flax modules name list items `down_blocks_0`; torch `down_blocks.0`. The time
// embedding's `linear_1`/`linear_2` are torch names too (diffusers' own converter keeps them).
std::string diffusers_module_name(const std::string& flax_part) {
  const size_t u = flax_part.rfind('_');
  if (u == std::string::npos || u == 0 || !all_digits(flax_part.substr(u + 1))) return flax_part;
  const std::string stem = flax_part.substr(0, u);
  if (stem == "linear") return flax_part;
  return stem + "." + flax_part.substr(u + 1);
}

struct AttentionRename {
  const char* flax;
  const char* torch;
};
// The VAE's FlaxAttentionBlock; the UNet's FlaxAttention already uses the torch names.
constexpr AttentionRename kVaeAttention[] = {
    {"query", "to_q"}, {"key", "to_k"}, {"value", "to_v"}, {"proj_attn", "to_out.0"}};

FlaxLayout kernel_layout(const std::string& path, size_t ndim) {
  if (ndim == 4) return FlaxLayout::ConvKernel;
  if (ndim == 2) return FlaxLayout::DenseKernel;
  fail("Flax parameter '", path, "' is a kernel with ", ndim, " dimensions (expected 2 or 4)");
}

}  // namespace

TorchParameter torch_parameter_for_flax(const std::string& flax_path, size_t ndim, FlaxNaming naming) {
  std::vector<std::string> parts = split(flax_path, '/');
  TorchParameter out;
  std::string& leaf = parts.back();
  if (leaf == "kernel") {
    out.layout = kernel_layout(flax_path, ndim);
    leaf = "weight";
  } else if (leaf == "scale" || leaf == "embedding") {
    leaf = "weight";
  }
  if (naming == FlaxNaming::Diffusers) {
    if (parts.size() >= 2)
      for (const auto& r : kVaeAttention)
        if (parts[parts.size() - 2] == r.flax) parts[parts.size() - 2] = r.torch;
    for (size_t i = 0; i + 1 < parts.size(); ++i) parts[i] = diffusers_module_name(parts[i]);
  }
  out.name = join(parts, '.');
  return out;
}

TorchParameter flax_parameter_for_torch(const std::string& torch_name, size_t ndim, FlaxNaming naming, bool vae) {
  std::vector<std::string> parts = split(torch_name, '.');
  TorchParameter out;
  if (naming == FlaxNaming::Diffusers) {  // diffusers' rename_key: `name.N` → `name_N`
    std::vector<std::string> joined;
    for (const std::string& p : parts) {
      if (all_digits(p) && !joined.empty()) joined.back() += "_" + p;
      else joined.push_back(p);
    }
    parts = joined;
    if (vae && parts.size() >= 2) {
      std::string& module = parts[parts.size() - 2];
      for (const auto& r : kVaeAttention) {
        std::string torch = r.torch;
        if (torch == "to_out.0") torch = "to_out_0";
        if (module == torch) module = r.flax;
      }
    }
  }
  std::string& leaf = parts.back();
  const bool embedding = parts.size() >= 2 && naming == FlaxNaming::Transformers &&
                         parts[parts.size() - 2].size() > 10 &&
                         parts[parts.size() - 2].compare(parts[parts.size() - 2].size() - 10, 10, "_embedding") == 0;
  if (leaf == "weight") {
    if (embedding) leaf = "embedding";
    else if (ndim == 1) leaf = "scale";  // norms: the only 1-D weights
    else out.layout = kernel_layout(torch_name, ndim), leaf = "kernel";
  }
  out.name = join(parts, '/');
  return out;
}

Shape torch_shape_of(const Shape& flax, FlaxLayout layout) {
  switch (layout) {
    case FlaxLayout::AsIs: return flax;
    case FlaxLayout::DenseKernel: return {flax[1], flax[0]};
    case FlaxLayout::ConvKernel: return {flax[3], flax[2], flax[0], flax[1]};  // HWIO → OIHW
  }
  return flax;
}

Shape flax_shape_of(const Shape& torch, FlaxLayout layout) {
  switch (layout) {
    case FlaxLayout::AsIs: return torch;
    case FlaxLayout::DenseKernel: return {torch[1], torch[0]};
    case FlaxLayout::ConvKernel: return {torch[2], torch[3], torch[1], torch[0]};  // OIHW → HWIO
  }
  return torch;
}

Tensor flax_to_torch_layout(const Tensor& flax, FlaxLayout layout) {
  if (layout == FlaxLayout::AsIs) return flax;
  Tensor out = Tensor::empty(torch_shape_of(flax.shape(), layout));
  const float* src = flax.data();
  float* dst = out.data();
  if (layout == FlaxLayout::DenseKernel) {  // (in, out) → (out, in)
    const int64_t in = flax.dim(0), outs = flax.dim(1);
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < outs; ++o) dst[o * in + i] = src[i * outs + o];
    return out;
  }
  const int64_t h = flax.dim(0), w = flax.dim(1), ci = flax.dim(2), co = flax.dim(3);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t i = 0; i < ci; ++i)
        for (int64_t o = 0; o < co; ++o) dst[((o * ci + i) * h + y) * w + x] = src[((y * w + x) * ci + i) * co + o];
  return out;
}

Tensor torch_to_flax_layout(const Tensor& torch, FlaxLayout layout) {
  if (layout == FlaxLayout::AsIs) return torch;
  Tensor out = Tensor::empty(flax_shape_of(torch.shape(), layout));
  const float* src = torch.data();
  float* dst = out.data();
  if (layout == FlaxLayout::DenseKernel) {  // (out, in) → (in, out)
    const int64_t outs = torch.dim(0), in = torch.dim(1);
    for (int64_t o = 0; o < outs; ++o)
      for (int64_t i = 0; i < in; ++i) dst[i * outs + o] = src[o * in + i];
    return out;
  }
  const int64_t co = torch.dim(0), ci = torch.dim(1), h = torch.dim(2), w = torch.dim(3);
  for (int64_t o = 0; o < co; ++o)
    for (int64_t i = 0; i < ci; ++i)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) dst[((y * w + x) * ci + i) * co + o] = src[((o * ci + i) * h + y) * w + x];
  return out;
}

std::shared_ptr<WeightSource> weights_from_flax_msgpack(const std::filesystem::path& file, FlaxNaming naming,
                                                        const std::string& description) {
  auto f = open_flax_msgpack(file);
  auto src = std::make_shared<WeightSource>(description);
  for (const TensorRecord& rec : f->tensors()) {
    TorchParameter p;
    try {
      p = torch_parameter_for_flax(rec.name, rec.shape.size(), naming);
    } catch (const Error& e) {
      fail("'", file.string(), "': ", e.what());
    }
    WeightSource::Entry e;
    e.file = f;
    e.record = &rec;
    e.shape = torch_shape_of(rec.shape, p.layout);
    e.origin = rec.name;
    if (p.layout != FlaxLayout::AsIs)
      e.transform = [layout = p.layout](const Tensor& t) { return flax_to_torch_layout(t, layout); };
    src->add(p.name, std::move(e));
  }
  return src;
}

}  // namespace octodiff
