// Flax ↔ PyTorch parameter names and layouts (declared in io/flax_msgpack.h).
#include <algorithm>
#include <cctype>

#include "core/parallel.h"

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
  // nn.Embed tables (token/position embeddings: 2-D); CLIP's vision patch_embedding is a conv.
  const bool embedding = ndim == 2 && parts.size() >= 2 && naming == FlaxNaming::Transformers &&
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

namespace {

// dst[c][r] = src[r][c] for the columns [c_begin, c_end) of a (rows, cols) matrix, in tiles.
void transpose_columns(const float* src, int64_t rows, int64_t cols, float* dst, int64_t c_begin, int64_t c_end) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = c_begin; c0 < c_end; c0 += kTile)
      for (int64_t c = c0; c < std::min(c_end, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) dst[c * rows + r] = src[r * cols + c];
}

// The whole matrix, on every thread (a model's kernels are ~10^9 floats).
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  parallel_for(cols, [&](int64_t c0, int64_t c1) { transpose_columns(src, rows, cols, dst, c0, c1); }, 64);
}

// `count` (rows, cols) matrices one after another, each transposed into the same place in dst.
void transpose_each(const float* src, int64_t count, int64_t rows, int64_t cols, float* dst) {
  parallel_for(count, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) transpose_columns(src + k * rows * cols, rows, cols, dst + k * rows * cols, 0, cols);
  }, 8);
}

}  // namespace

// HWIO (h, w, i, o) = (h·w·i, o) as a matrix; OIHW = (o, i, h, w). Transposing the matrix gives
// (o, h·w·i) = (o, h, w, i), and each o's (h·w, i) block transposed gives (o, i, h·w).
Tensor flax_to_torch_layout(const Tensor& flax, FlaxLayout layout) {
  if (layout == FlaxLayout::AsIs) return flax;
  Tensor out = Tensor::empty(torch_shape_of(flax.shape(), layout));
  if (layout == FlaxLayout::DenseKernel) {  // (in, out) → (out, in)
    transpose(flax.data(), flax.dim(0), flax.dim(1), out.data());
    return out;
  }
  const int64_t hw = flax.dim(0) * flax.dim(1), ci = flax.dim(2), co = flax.dim(3);
  if (hw == 1) {  // a 1×1 conv: (i, o) → (o, i)
    transpose(flax.data(), ci, co, out.data());
    return out;
  }
  Tensor ohwi = Tensor::empty({co, hw * ci});
  transpose(flax.data(), hw * ci, co, ohwi.data());
  transpose_each(ohwi.data(), co, hw, ci, out.data());
  return out;
}

// The inverse: OIHW as (o, i, h·w) → per o (h·w, i) → (o, h·w·i) transposed → (h·w·i, o).
Tensor torch_to_flax_layout(const Tensor& torch, FlaxLayout layout) {
  if (layout == FlaxLayout::AsIs) return torch;
  Tensor out = Tensor::empty(flax_shape_of(torch.shape(), layout));
  if (layout == FlaxLayout::DenseKernel) {  // (out, in) → (in, out)
    transpose(torch.data(), torch.dim(0), torch.dim(1), out.data());
    return out;
  }
  const int64_t co = torch.dim(0), ci = torch.dim(1), hw = torch.dim(2) * torch.dim(3);
  if (hw == 1) {
    transpose(torch.data(), co, ci, out.data());
    return out;
  }
  Tensor ohwi = Tensor::empty({co, hw * ci});
  transpose_each(torch.data(), co, ci, hw, ohwi.data());
  transpose(ohwi.data(), co, hw * ci, out.data());
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
