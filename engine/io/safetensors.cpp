#include "io/safetensors.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "io/files.h"

namespace octodiff {
namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::Bool, "BOOL", 1}, {DType::U8, "U8", 1},     {DType::I8, "I8", 1},
    {DType::F8_E5M2, "F8_E5M2", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::I16, "I16", 2},
    {DType::U16, "U16", 2},   {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2},
    {DType::I32, "I32", 4},   {DType::U32, "U32", 4},   {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},   {DType::I64, "I64", 8},   {DType::U64, "U64", 8},
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

size_t dtype_size(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.size;
  return 0;
}

const char* dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.name;
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  for (const auto& d : kDTypes) {
    if (name == d.name) {
      *out = d.type;
      return true;
    }
  }
  return false;
}

int64_t TensorRecord::numel() const { return shape_numel(shape); }

void parse_safetensors_header(std::string_view header, uint64_t data_size, const std::string& what,
                              std::vector<TensorRecord>* tensors,
                              std::map<std::string, std::string>* metadata) {
  using nlohmann::json;
  auto bad = [&](const auto&... args) { fail("invalid safetensors file '", what, "': ", args...); };

  if (header.empty() || header.front() != '{') bad("the header is not a JSON object");
  std::set<std::string> seen;
  json doc;
  try {
    // The callback rejects duplicate top-level names, which a map-based parse would hide.
    doc = json::parse(header.begin(), header.end(),
                      [&](int depth, json::parse_event_t event, json& parsed) {
                        if (depth == 1 && event == json::parse_event_t::key) {
                          std::string key = parsed.get<std::string>();
                          if (!seen.insert(key).second) bad("tensor '", key, "' appears twice");
                        }
                        return true;
                      });
  } catch (const json::exception& e) {
    bad("the header is not valid UTF-8 JSON (", e.what(), ")");
  }
  if (!doc.is_object()) bad("the header is not a JSON object");

  tensors->clear();
  metadata->clear();
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad("__metadata__ value '", m.key(), "' is not a string");
        (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) bad("entry '", name, "' is not an object");
    TensorRecord rec;
    rec.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) bad("tensor '", name, "' has no dtype");
    if (!parse_dtype(dt->get<std::string>(), &rec.dtype))
      bad("tensor '", name, "' has unknown dtype '", dt->get<std::string>(), "'");
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) bad("tensor '", name, "' has no shape");
    if (sh->size() > 16) bad("tensor '", name, "' has ", sh->size(), " dimensions");
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) bad("tensor '", name, "' has a non-integer or negative dimension");
      uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          mul_overflows(numel, dim, &numel))
        bad("tensor '", name, "' has a shape whose size overflows");
      rec.shape.push_back(static_cast<int64_t>(dim));
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      bad("tensor '", name, "' has no valid data_offsets");
    rec.begin = (*off)[0].get<uint64_t>();
    rec.end = (*off)[1].get<uint64_t>();
    if (rec.end < rec.begin) bad("tensor '", name, "' has data_offsets that end before they begin");
    if (rec.end > data_size)
      bad("tensor '", name, "' ends at byte ", rec.end, " but the data section has ", data_size,
          " bytes (truncated file?)");
    uint64_t expect = 0;
    if (mul_overflows(numel, dtype_size(rec.dtype), &expect))
      bad("tensor '", name, "' has a shape whose byte size overflows");
    if (expect != rec.nbytes())
      bad("tensor '", name, "' is ", dtype_name(rec.dtype), " ", shape_str(rec.shape), " = ", expect,
          " bytes but its data_offsets span ", rec.nbytes(), " bytes");
    tensors->push_back(std::move(rec));
  }

  // Byte ranges must tile the data section exactly: no gaps, no overlaps, nothing left over.
  std::vector<const TensorRecord*> order;
  for (const auto& t : *tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorRecord* a, const TensorRecord* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  for (const TensorRecord* t : order) {
    if (t->begin < pos) bad("tensor '", t->name, "' overlaps the tensor before it");
    if (t->begin > pos) bad("there is a gap of ", t->begin - pos, " bytes before tensor '", t->name, "'");
    pos = t->end;
  }
  if (pos != data_size)
    bad("the data section has ", data_size - pos, " bytes that belong to no tensor");
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const std::string what = path.string();
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  if (ext == ".ckpt" || ext == ".pt" || ext == ".pth" || ext == ".bin")
    fail("'", what, "' is a PyTorch pickle file, which Octodiff never loads (pickles can run code). "
         "Convert it to .safetensors first, e.g. with the safetensors 'convert' tool or "
         "diffusers' convert_original_stable_diffusion_to_diffusers.py --to_safetensors.");
  f->map_ = std::make_shared<MappedFile>(path);
  const uint64_t size = f->map_->size();
  const uint8_t* base = f->map_->data();
  // A safetensors header's JSON starts at byte 8; a pickle there means a file the length bytes
  // only happen to look like (a 128- or 384-byte header starts with 0x80 0x00 / 0x80 0x01).
  const bool json_at_8 = size > 8 && base[8] == '{';
  if (size >= 2 && base[0] == 0x80 && base[1] <= 5 && !json_at_8)
    fail("'", what, "' is a PyTorch pickle, not safetensors; convert it to .safetensors first");
  if (size >= 4 && base[0] == 'P' && base[1] == 'K' && base[2] == 3 && base[3] == 4 && !json_at_8)
    fail("'", what, "' is a zip (PyTorch .ckpt/.pt) file, not safetensors; convert it to "
         ".safetensors first");
  if (size < 8) fail("invalid safetensors file '", what, "': only ", size, " bytes, too short");
  const uint64_t n = read_u64_le(base);
  if (n > kMaxHeaderBytes)
    fail("invalid safetensors file '", what, "': header length ", n, " exceeds the ",
         kMaxHeaderBytes, "-byte limit");
  if (n > size - 8)
    fail("invalid safetensors file '", what, "': header length ", n, " is larger than the file (",
         size, " bytes); the file is truncated or not safetensors");
  std::string_view header(reinterpret_cast<const char*>(base + 8), n);
  f->data_ = base + 8 + n;
  f->data_size_ = size - 8 - n;
  parse_safetensors_header(header, f->data_size_, what, &f->tensors_, &f->metadata_);
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  return f;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::over_mapping(const std::filesystem::path& path,
                                                               std::shared_ptr<MappedFile> map,
                                                               std::vector<TensorRecord> tensors) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = std::move(map);
  f->data_ = f->map_->data();
  f->data_size_ = f->map_->size();
  f->tensors_ = std::move(tensors);
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  return f;
}

SafetensorsFile::~SafetensorsFile() = default;

const TensorRecord* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorRecord& SafetensorsFile::get(std::string_view name) const {
  const TensorRecord* t = find(name);
  if (!t) fail("tensor '", name, "' is missing from '", path_.string(), "'");
  return *t;
}

const uint8_t* SafetensorsFile::bytes(const TensorRecord& t) const { return data_ + t.begin; }

namespace {

// n float16 values (little-endian, any alignment) as float32, exactly as f16_to_f32 converts
// them: with F16C eight at a time, except where a group holds a NaN (VCVTPH2PS would set the
// quiet bit of a signalling one; f16_to_f32 keeps the bits).
void f16_to_f32_n(const uint8_t* src, int64_t n, float* dst) {
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
    if (!_mm_testz_si128(nan, nan)) {
      for (int64_t j = i; j < i + 8; ++j) dst[j] = f16_to_f32(load<uint16_t>(src + 2 * j));
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(load<uint16_t>(src + 2 * i));
}

}  // namespace

Tensor SafetensorsFile::to_f32(const TensorRecord& t) const {
  Tensor out = Tensor::empty(t.shape);
  to_f32_into(t, out.data());
  return out;
}

void SafetensorsFile::to_f32_into(const TensorRecord& t, float* dst) const {
  if (!t.pieces.empty()) {
    int64_t at = 0;
    for (const TensorRecord& piece : t.pieces) {
      to_f32_into(piece, dst + at);
      at += piece.numel();
    }
    return;
  }
  const uint8_t* src = bytes(t);
  const uint64_t at = static_cast<uint64_t>(src - map_->data());
  // Other dtypes are converted straight from the mapping: a file cut short since it was opened
  // is then an error here rather than a SIGBUS in the conversion.
  if (t.dtype != DType::F32) map_->check_still_holds(at, t.nbytes());
  map_->note_use(at + t.nbytes());  // for the read-ahead
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::F32: {  // read, not copied from the mapping: see MappedFile::read
      // On every thread: one thread's copy out of the page cache ran at ~6 GB/s, and a 4 GB
      // checkpoint's reads sat between the (parallel) packing of its weights.
      parallel_for(
          n,
          [&](int64_t i0, int64_t i1) {
            map_->read(at + 4 * static_cast<uint64_t>(i0), dst + i0, 4 * static_cast<uint64_t>(i1 - i0));
          },
          1 << 18);
      break;
    }
    case DType::F16:  // most real checkpoints: 1e9 conversions, so on every thread
      parallel_for(n, [&](int64_t i0, int64_t i1) { f16_to_f32_n(src + 2 * i0, i1 - i0, dst + i0); }, 1 << 16);
      break;
    case DType::BF16:
      parallel_for(
          n,
          [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) dst[i] = bf16_to_f32(load<uint16_t>(src + 2 * i));
          },
          1 << 16);
      break;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(load<double>(src + 8 * i));
      break;
    default:
      fail("tensor '", t.name, "' in '", path_.string(), "' is ", dtype_name(t.dtype),
           ", expected a floating-point dtype (F32, F16, BF16)");
  }
}

std::vector<int64_t> SafetensorsFile::to_i64(const TensorRecord& t) const {
  if (!t.pieces.empty()) fail("tensor '", t.name, "' in '", path_.string(), "' is chunked; expected a plain integer tensor");
  const uint8_t* src = bytes(t);
  const int64_t n = t.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::Bool:
      case DType::U8: out[i] = src[i]; break;
      case DType::I8: out[i] = static_cast<int8_t>(src[i]); break;
      case DType::I16: out[i] = load<int16_t>(src + 2 * i); break;
      case DType::U16: out[i] = load<uint16_t>(src + 2 * i); break;
      case DType::I32: out[i] = load<int32_t>(src + 4 * i); break;
      case DType::U32: out[i] = load<uint32_t>(src + 4 * i); break;
      case DType::I64: out[i] = load<int64_t>(src + 8 * i); break;
      case DType::U64: out[i] = static_cast<int64_t>(load<uint64_t>(src + 8 * i)); break;
      default:
        fail("tensor '", t.name, "' in '", path_.string(), "' is ", dtype_name(t.dtype),
             ", expected an integer dtype");
    }
  }
  return out;
}

void SafetensorsFile::read_ahead() const { map_->read_ahead(); }

const float* SafetensorsFile::f32_in_place(const TensorRecord& t) const {
  const uint8_t* src = bytes(t);
  if (!t.pieces.empty() || t.dtype != DType::F32 || t.nbytes() == 0 || reinterpret_cast<uintptr_t>(src) % alignof(float)) return nullptr;
  const uint64_t at = static_cast<uint64_t>(src - map_->data());
  map_->check_still_holds(at, t.nbytes());
  map_->note_use(at + t.nbytes());  // for the read-ahead
  return reinterpret_cast<const float*>(src);
}

void SafetensorsFile::release(const TensorRecord& t) const {
  if (!t.pieces.empty()) {
    for (const TensorRecord& piece : t.pieces) release(piece);
    return;
  }
  map_->release(static_cast<uint64_t>(data_ - map_->data()) + t.begin, t.nbytes());
}

std::vector<double> SafetensorsFile::to_f64(const TensorRecord& t) const {
  if (t.dtype == DType::F64 && t.pieces.empty()) {
    std::vector<double> out(static_cast<size_t>(t.numel()));
    if (!out.empty()) std::memcpy(out.data(), bytes(t), out.size() * 8);
    return out;
  }
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16) {
    auto ints = to_i64(t);
    return std::vector<double>(ints.begin(), ints.end());
  }
  Tensor f = to_f32(t);
  return std::vector<double>(f.begin(), f.end());
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t nbytes = static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8) text.push_back(' ');  // keep the data 8-byte aligned
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));

  AtomicFile out(path);
  out.write(len, 8);
  out.write(text.data(), text.size());
  std::vector<uint8_t> buffer;
  for (const auto& t : tensors) {
    size_t nbytes = static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    buffer.assign(nbytes, 0);
    if (t.fill) t.fill(buffer.data(), nbytes);
    out.write(buffer.data(), nbytes);
  }
  out.commit();
}

void write_safetensors_f32(const std::filesystem::path& path,
                           const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  std::vector<TensorToWrite> list;
  for (const auto& [name, tensor] : tensors) {
    const Tensor* t = &tensor;
    list.push_back({name, DType::F32, tensor.shape(), [t](uint8_t* dst, size_t nbytes) {
                      std::memcpy(dst, t->data(), nbytes);
                    }});
  }
  write_safetensors(path, list, metadata);
}

}  // namespace octodiff
