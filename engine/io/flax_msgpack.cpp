#include "io/flax_msgpack.h"

#include <msgpack.hpp>

#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "io/files.h"
#include "io/weight_source.h"

namespace octodiff {
namespace {

constexpr const char* kChunkedMarker = "__msgpack_chunked_array__";

// One non-map value of the file, by its path.
struct FlatLeaf {
  enum class Kind { Ext, Bool, Int, Other };
  std::string path;
  Kind kind = Kind::Other;
  int ext_type = 0;
  uint64_t offset = 0, size = 0;  // Ext: the payload, from the start of the file
  uint64_t value = 0;             // Bool, Int
  const char* description = "";   // Other: what it is, for messages
};

// Walks the outer structure (msgpack-cxx's visitor parser: no object tree is built), flattening
// nested maps into leaves. Stops at the first thing a Flax state dict cannot hold.
class FlatteningVisitor : public msgpack::null_visitor {
 public:
  // Leaves' paths may take at most 16 bytes per byte of the file: a deep path of long keys is
  // repeated for every leaf under it, which would otherwise let a small file ask for gigabytes.
  FlatteningVisitor(const uint8_t* base, uint64_t size, std::vector<FlatLeaf>* leaves)
      : base_(base), leaves_(leaves), path_budget_(size * 16) {}

  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

  bool visit_nil() { return other("nil"); }
  bool visit_boolean(bool v) { return scalar(FlatLeaf::Kind::Bool, v ? 1 : 0, "a boolean"); }
  bool visit_positive_integer(uint64_t v) { return scalar(FlatLeaf::Kind::Int, v, "an integer"); }
  bool visit_negative_integer(int64_t) { return other("a negative integer"); }
  bool visit_float32(float) { return other("a float"); }
  bool visit_float64(double) { return other("a float"); }
  bool visit_str(const char* v, uint32_t size) { return in_key_ ? key(v, size) : other("a string"); }
  bool visit_bin(const char*, uint32_t) { return other("binary data outside an array"); }
  bool visit_ext(const char* v, uint32_t size) {
    if (in_key_ || depth_ == 0 || size == 0) return other("an extension value");
    if (!spend_path()) return false;
    FlatLeaf leaf{path_, FlatLeaf::Kind::Ext};
    leaf.ext_type = static_cast<int8_t>(v[0]);
    leaf.offset = static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(v + 1) - base_);
    leaf.size = size - 1;
    leaves_->push_back(std::move(leaf));
    return true;
  }
  bool start_array(uint32_t) {
    return stop(where(), " is an array, where Flax writes maps (tuples and lists are maps with keys \"0\", \"1\", ...)");
  }
  bool start_map(uint32_t) {
    if (in_key_) return stop(where(), " has a map as a key");
    if (depth_ >= FlaxMsgpackLimits::kMaxDepth)
      return stop(where(), " nests maps deeper than ", FlaxMsgpackLimits::kMaxDepth, " levels");
    ++depth_;
    seen_.emplace_back();
    return true;
  }
  bool start_map_key() { in_key_ = true; return true; }
  bool end_map_key() { in_key_ = false; return true; }
  bool end_map_value() {
    path_.resize(path_lengths_.back());
    path_lengths_.pop_back();
    return true;
  }
  bool end_map() {
    --depth_;
    seen_.pop_back();
    return true;
  }
  void parse_error(size_t, size_t at) {
    if (error_.empty()) error_ = cat("malformed msgpack at byte ", at, " (", where(), ")");
  }
  void insufficient_bytes(size_t, size_t) {
    if (error_.empty()) error_ = cat("the file ends in the middle of ", where(), " (truncated?)");
  }

 private:
  std::string where() const {
    if (path_.empty()) return "the top level";
    if (path_.size() > 200) return cat("'...", path_.substr(path_.size() - 200), "'");
    return cat("'", path_, "'");
  }

  template <typename... Args>
  bool stop(const Args&... args) {
    if (error_.empty()) error_ = cat(args...);
    return false;
  }
  bool key(const char* v, uint32_t size) {
    if (size == 0 || size > FlaxMsgpackLimits::kMaxKeyBytes)
      return stop(where(), " has a key of ", size, " bytes (1 to ", FlaxMsgpackLimits::kMaxKeyBytes, " allowed)");
    std::string k(v, size);
    if (k.find('/') != std::string::npos) return stop(where(), " has the key '", k, "', which contains '/'");
    if (!seen_.back().insert(k).second)
      return stop("the key '", path_.empty() ? k : path_ + "/" + k, "' appears twice");
    path_lengths_.push_back(path_.size());
    path_ += path_.empty() ? k : "/" + k;
    return true;
  }
  bool scalar(FlatLeaf::Kind kind, uint64_t value, const char* description) {
    if (in_key_ || depth_ == 0) return other(description);
    if (!spend_path()) return false;
    FlatLeaf leaf{path_, kind};
    leaf.value = value;
    leaf.description = description;
    leaves_->push_back(std::move(leaf));
    return true;
  }
  bool spend_path() {
    if (path_.size() + sizeof(FlatLeaf) > path_budget_)
      return stop(where(), ": the file's paths are implausibly long for its size");
    path_budget_ -= path_.size() + sizeof(FlatLeaf);
    return true;
  }
  bool other(const char* description) {
    if (depth_ == 0) return stop("the top level is ", description, ", not a map");
    if (in_key_) return stop(where(), " has ", description, " as a key (Flax keys are strings)");
    return stop(where(), " is ", description, ", not an array");
  }

  const uint8_t* base_;
  std::vector<FlatLeaf>* leaves_;
  std::string path_;
  std::vector<size_t> path_lengths_;
  std::vector<std::set<std::string>> seen_;  // keys of each open map
  int depth_ = 0;
  bool in_key_ = false;
  uint64_t path_budget_;
  std::string error_;
};

struct NumpyDType {
  const char* name;
  DType type;
};

constexpr NumpyDType kNumpyDTypes[] = {
    {"float32", DType::F32}, {"bfloat16", DType::BF16}, {"float16", DType::F16}, {"float64", DType::F64},
    {"int8", DType::I8},     {"int16", DType::I16},     {"int32", DType::I32},   {"int64", DType::I64},
    {"uint8", DType::U8},    {"uint16", DType::U16},    {"uint32", DType::U32},  {"uint64", DType::U64},
    {"bool", DType::Bool},
};

bool reference_everything(msgpack::type::object_type, std::size_t, void*) { return true; }

// An ext type 1 (or 3) payload: [shape, dtype name, bytes]. The bytes stay in the file.
TensorRecord parse_ndarray(const uint8_t* base, const FlatLeaf& leaf, const std::string& what) {
  auto bad = [&](const auto&... args) { fail("invalid Flax msgpack file '", what, "': tensor '", leaf.path, "' ", args...); };
  const char* payload = reinterpret_cast<const char*>(base + leaf.offset);
  msgpack::object_handle handle;
  size_t used = 0;
  try {
    // Limits: arrays of at most kMaxDims items, no maps or exts, strings of 64 bytes; bin data is
    // referenced in place, so nothing is allocated beyond a few objects.
    const msgpack::unpack_limit limit(FlaxMsgpackLimits::kMaxDims, 0, 64, 0xffffffff, 0, 3);
    handle = msgpack::unpack(payload, leaf.size, used, reference_everything, nullptr, limit);
  } catch (const msgpack::insufficient_bytes&) {
    bad("has a truncated array payload");
  } catch (const std::exception& e) {
    bad("has an array payload that is not [shape, dtype, bytes] (", e.what(), ")");
  }
  if (used != leaf.size) bad("has ", leaf.size - used, " bytes after its array payload");
  const msgpack::object& o = handle.get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size != 3) bad("has an array payload that is not [shape, dtype, bytes]");
  const msgpack::object& shape = o.via.array.ptr[0];
  const msgpack::object& dtype = o.via.array.ptr[1];
  const msgpack::object& data = o.via.array.ptr[2];
  if (shape.type != msgpack::type::ARRAY) bad("has a shape that is not an array of integers");
  if (dtype.type != msgpack::type::STR && dtype.type != msgpack::type::BIN) bad("has a dtype that is not a string");
  // Bytes are bin (msgpack >= 1.0's use_bin_type); raw str from older writers is accepted too.
  if (data.type != msgpack::type::BIN && data.type != msgpack::type::STR) bad("has data that is not msgpack binary");
  const bool bin = data.type == msgpack::type::BIN;
  const uint64_t data_size = bin ? data.via.bin.size : data.via.str.size;
  const char* data_ptr = bin ? data.via.bin.ptr : data.via.str.ptr;

  TensorRecord rec;
  rec.name = leaf.path;
  const std::string dtype_str(dtype.type == msgpack::type::STR ? dtype.via.str.ptr : dtype.via.bin.ptr,
                              dtype.type == msgpack::type::STR ? dtype.via.str.size : dtype.via.bin.size);
  bool known = false;
  for (const auto& d : kNumpyDTypes)
    if (dtype_str == d.name) rec.dtype = d.type, known = true;
  if (!known) bad("has dtype '", dtype_str, "', which Octodiff does not read");

  uint64_t numel = 1;
  for (uint32_t i = 0; i < shape.via.array.size; ++i) {
    const msgpack::object& d = shape.via.array.ptr[i];
    if (d.type != msgpack::type::POSITIVE_INTEGER) bad("has a shape that is not an array of non-negative integers");
    const uint64_t dim = d.via.u64;
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(numel, dim, &numel))
      bad("has a shape whose size overflows");
    rec.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t expect = 0;
  if (__builtin_mul_overflow(numel, dtype_size(rec.dtype), &expect)) bad("has a shape whose byte size overflows");
  if (expect != data_size)
    bad("is ", dtype_str, " ", shape_str(rec.shape), " = ", expect, " bytes but holds ", data_size, " bytes");
  rec.begin = static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(data_ptr) - base);
  rec.end = rec.begin + data_size;
  return rec;
}

TensorRecord array_leaf(const uint8_t* base, const FlatLeaf& leaf, const std::string& what) {
  auto bad = [&](const auto&... args) { fail("invalid Flax msgpack file '", what, "': '", leaf.path, "' ", args...); };
  if (leaf.kind != FlatLeaf::Kind::Ext) bad("is ", leaf.description, ", not an array");
  if (leaf.ext_type == 2) bad("is a complex number, not an array");
  if (leaf.ext_type != 1 && leaf.ext_type != 3)
    bad("has msgpack extension type ", leaf.ext_type, " (Flax arrays are type 1, numpy scalars type 3)");
  TensorRecord rec = parse_ndarray(base, leaf, what);
  if (leaf.ext_type == 3 && !rec.shape.empty()) bad("is a numpy scalar with shape ", shape_str(rec.shape));
  return rec;
}

// The parts of one chunked leaf, as they come (keyed by their decimal index).
struct ChunkedLeaf {
  bool marked = false;
  std::map<std::string, uint64_t> shape;
  std::map<std::string, TensorRecord> chunks;
};

// Parts 0..n-1 of a chunked leaf's map, in order; anything else is an error.
template <typename T>
std::vector<const T*> in_index_order(const std::map<std::string, T>& parts, const std::string& what,
                                     const std::string& name, const char* field) {
  std::vector<const T*> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto it = parts.find(std::to_string(i));
    if (it == parts.end())
      fail("invalid Flax msgpack file '", what, "': chunked tensor '", name, "' has ", field,
           " keys that are not 0..", parts.size() - 1);
    out.push_back(&it->second);
  }
  return out;
}

TensorRecord assemble_chunked(const std::string& name, const ChunkedLeaf& c, const std::string& what) {
  auto bad = [&](const auto&... args) { fail("invalid Flax msgpack file '", what, "': chunked tensor '", name, "' ", args...); };
  if (!c.marked) bad("has a false ", kChunkedMarker, " marker");
  if (c.chunks.empty()) bad("has no chunks");
  if (c.shape.size() > FlaxMsgpackLimits::kMaxDims) bad("has ", c.shape.size(), " dimensions");
  TensorRecord rec;
  rec.name = name;
  uint64_t numel = 1, total = 0;
  for (const uint64_t* dim : in_index_order(c.shape, what, name, "shape")) {
    if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(numel, *dim, &numel))
      bad("has a shape whose size overflows");
    rec.shape.push_back(static_cast<int64_t>(*dim));
  }
  for (const TensorRecord* chunk : in_index_order(c.chunks, what, name, "chunks")) {
    if (chunk->shape.size() != 1) bad("has a chunk of shape ", shape_str(chunk->shape), " (chunks are flat)");
    if (!rec.pieces.empty() && chunk->dtype != rec.dtype) bad("has chunks of different dtypes");
    rec.dtype = chunk->dtype;
    total += static_cast<uint64_t>(chunk->shape[0]);  // each chunk's bytes lie in the file: no overflow
    rec.pieces.push_back(*chunk);
  }
  if (total != numel) bad("has chunks of ", total, " elements for shape ", shape_str(rec.shape));
  return rec;
}

// The nearest ancestor of `path` that is a chunked leaf, or end().
std::map<std::string, ChunkedLeaf>::iterator chunked_parent(std::map<std::string, ChunkedLeaf>& chunked,
                                                            const std::string& path) {
  for (size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0; slash = path.rfind('/', slash - 1)) {
    auto it = chunked.find(path.substr(0, slash));
    if (it != chunked.end()) return it;
  }
  return chunked.end();
}

// Adds a leaf under a chunked leaf's map to it: the marker, "shape/N" or "chunks/N".
void add_chunk_part(const uint8_t* base, const FlatLeaf& leaf, const std::string& parent, ChunkedLeaf* c,
                    const std::string& what) {
  const std::string rel = leaf.path.substr(parent.size() + 1);
  auto bad = [&](const auto&... args) { fail("invalid Flax msgpack file '", what, "': chunked tensor '", parent, "' ", args...); };
  if (rel == kChunkedMarker) {
    if (leaf.kind != FlatLeaf::Kind::Bool) bad("has a marker that is not a boolean");
    c->marked = leaf.value != 0;
  } else if (rel.rfind("shape/", 0) == 0 && rel.find('/', 6) == std::string::npos) {
    if (leaf.kind != FlatLeaf::Kind::Int) bad("has a shape entry '", rel, "' that is not an integer");
    c->shape[rel.substr(6)] = leaf.value;
  } else if (rel.rfind("chunks/", 0) == 0 && rel.find('/', 7) == std::string::npos) {
    c->chunks[rel.substr(7)] = array_leaf(base, leaf, what);
  } else {
    bad("has an unexpected entry '", rel, "'");
  }
}

}  // namespace

std::vector<TensorRecord> parse_flax_msgpack(const uint8_t* data, uint64_t size, const std::string& what) {
  if (size == 0) fail("invalid Flax msgpack file '", what, "': the file is empty");
  std::vector<FlatLeaf> leaves;
  FlatteningVisitor visitor(data, size, &leaves);
  size_t used = 0;
  bool ok = false;
  try {
    ok = msgpack::parse(reinterpret_cast<const char*>(data), size, used, visitor);
  } catch (const std::exception& e) {
    fail("invalid Flax msgpack file '", what, "': ", e.what());
  }
  if (!ok) fail("invalid Flax msgpack file '", what, "': ", visitor.error().empty() ? "malformed msgpack" : visitor.error());
  if (used != size) fail("invalid Flax msgpack file '", what, "': ", size - used, " bytes follow the top-level map");

  std::map<std::string, ChunkedLeaf> chunked;
  const std::string marker = std::string("/") + kChunkedMarker;
  for (const FlatLeaf& leaf : leaves)
    if (leaf.path.size() > marker.size() && leaf.path.compare(leaf.path.size() - marker.size(), marker.size(), marker) == 0)
      chunked[leaf.path.substr(0, leaf.path.size() - marker.size())];
  std::vector<TensorRecord> records;
  std::vector<std::string> chunked_order;
  for (const FlatLeaf& leaf : leaves) {
    auto parent = chunked_parent(chunked, leaf.path);
    if (parent == chunked.end()) {
      records.push_back(array_leaf(data, leaf, what));
      continue;
    }
    chunked_order.push_back(parent->first);  // repeats are skipped below
    add_chunk_part(data, leaf, parent->first, &parent->second, what);
  }
  std::set<std::string> listed;
  for (const std::string& name : chunked_order)
    if (listed.insert(name).second) records.push_back(assemble_chunked(name, chunked[name], what));
  return records;
}

std::shared_ptr<SafetensorsFile> open_flax_msgpack(const std::filesystem::path& path) {
  auto map = std::make_shared<MappedFile>(path);
  auto records = parse_flax_msgpack(map->data(), map->size(), path.string());
  return SafetensorsFile::over_mapping(path, std::move(map), std::move(records));
}

}  // namespace octodiff
