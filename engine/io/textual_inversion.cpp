#include "io/textual_inversion.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/safetensors.h"

namespace octodiff {
namespace {

constexpr int64_t kMaxVectors = 75;  // one chunk of a prompt

std::string key_list(const SafetensorsFile& file) {
  std::string keys;
  for (const auto& t : file.tensors()) keys += (keys.empty() ? "" : ", ") + t.name;
  return keys.empty() ? "none" : keys;
}

// The record holding the vectors, and the layout's name (SD 1.x/2.x layouts).
const TensorRecord& vectors_record(const SafetensorsFile& file, std::string* layout) {
  const std::string where = file.path().string();
  if (const TensorRecord* t = file.find("emb_params")) {
    *layout = "emb_params";
    return *t;
  }
  if (const TensorRecord* t = file.find("string_to_param.*")) {
    *layout = "string_to_param";
    return *t;
  }
  if (file.tensors().size() == 1) {
    *layout = "diffusers";
    return file.tensors()[0];
  }
  fail(where, ": not a textual-inversion embedding (no emb_params, string_to_param.* or single token tensor; "
       "tensors: ", key_list(file), ")");
}

Tensor read_vectors(const SafetensorsFile& file, const TensorRecord& t) {
  const std::string where = cat(file.path().string(), ": tensor '", t.name, "'");
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16 && t.dtype != DType::F64)
    fail(where, " has dtype ", dtype_name(t.dtype), "; an embedding is floating point");
  if (t.shape.empty() || t.shape.size() > 2)
    fail(where, " has shape ", shape_str(t.shape), "; an embedding is (vectors, width) or (width)");
  const int64_t n = t.shape.size() == 2 ? t.shape[0] : 1, width = t.shape.back();
  if (n < 1 || width < 1) fail(where, " has shape ", shape_str(t.shape), ": no vectors");
  if (n > kMaxVectors) fail(where, " has ", n, " vectors; at most ", kMaxVectors, " fit in a prompt chunk");
  Tensor v = file.to_f32(t).reshaped({n, width});
  for (int64_t i = 0; i < v.numel(); ++i)
    if (!std::isfinite(v.data()[i])) fail(where, " holds a NaN or infinite value");
  return v;
}

bool is_sdxl_file(const SafetensorsFile& file) { return file.find("clip_l") || file.find("clip_g"); }

// The SDXL layout: clip_l and clip_g, the same number of vectors, nothing else.
void read_sdxl_vectors(const SafetensorsFile& file, TextualInversion& ti) {
  const std::string where = file.path().string();
  const TensorRecord* l = file.find("clip_l");
  const TensorRecord* g = file.find("clip_g");
  if (!l || !g)
    fail(where, ": an SDXL embedding needs both tensors clip_l and clip_g; it has only ", l ? "clip_l" : "clip_g",
         " (tensors: ", key_list(file), ")");
  for (const TensorRecord& t : file.tensors())
    if (t.name != "clip_l" && t.name != "clip_g")
      fail(where, ": unknown tensor '", t.name, "' beside clip_l and clip_g of an SDXL embedding");
  ti.layout = "sdxl";
  ti.vectors = read_vectors(file, *l);
  ti.vectors_g = read_vectors(file, *g);
  if (ti.vectors.dim(0) != ti.vectors_g.dim(0))
    fail(where, ": tensor 'clip_l' has ", ti.vectors.dim(0), " vectors and tensor 'clip_g' ", ti.vectors_g.dim(0),
         "; an SDXL embedding has as many for both text towers");
}

}  // namespace

TextualInversion read_textual_inversion(const std::filesystem::path& path) {
  const auto file = SafetensorsFile::open(path);
  TextualInversion ti;
  ti.name = path.stem().string();
  ti.path = path;
  if (is_sdxl_file(*file)) {
    read_sdxl_vectors(*file, ti);
    return ti;
  }
  const TensorRecord& record = vectors_record(*file, &ti.layout);
  ti.vectors = read_vectors(*file, record);
  return ti;
}

TextualInversionLibrary read_textual_inversion_folder(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("embeddings folder ", dir.string(), " does not exist or is not a folder");
  TextualInversionLibrary library;
  library.dir = dir;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".safetensors") continue;
    TextualInversionEntry e;
    e.embedding.name = entry.path().stem().string();
    e.embedding.path = entry.path();
    try {
      e.embedding = read_textual_inversion(entry.path());
    } catch (const Error& error) {
      e.error = error.what();
    }
    library.entries.push_back(std::move(e));
  }
  if (ec) fail("embeddings folder ", dir.string(), ": ", ec.message());
  std::sort(library.entries.begin(), library.entries.end(),
            [](const auto& a, const auto& b) { return a.embedding.name < b.embedding.name; });
  return library;
}

}  // namespace octodiff
