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

// The record holding the vectors, and the layout's name.
const TensorRecord& vectors_record(const SafetensorsFile& file, std::string* layout) {
  const std::string where = file.path().string();
  if (file.find("clip_l") || file.find("clip_g"))
    fail(where, ": an SDXL embedding (tensors clip_l/clip_g); this is for another architecture");
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

}  // namespace

TextualInversion read_textual_inversion(const std::filesystem::path& path) {
  const auto file = SafetensorsFile::open(path);
  TextualInversion ti;
  ti.name = path.stem().string();
  ti.path = path;
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
