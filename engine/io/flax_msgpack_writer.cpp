// write_flax_msgpack (io/flax_msgpack.h): flax.serialization.to_bytes's format, streamed.
#include <msgpack.hpp>

#include <map>

#include "core/error.h"
#include "io/files.h"
#include "io/flax_msgpack.h"

namespace octodiff {
namespace {

// The nested maps of a state dict: children in first-seen order, leaves index into `tensors`.
struct Node {
  // Two vectors, not one of pairs: a pair may not hold the still incomplete Node (clang refuses it).
  std::vector<std::string> child_names;
  std::vector<Node> children;           // children[i] is named child_names[i]
  std::map<std::string, size_t> index;  // child name → position in children
  const TensorToWrite* tensor = nullptr;
};

Node& child(Node& n, const std::string& name) {
  auto it = n.index.find(name);
  if (it != n.index.end()) return n.children[it->second];
  n.index[name] = n.children.size();
  n.child_names.push_back(name);
  n.children.emplace_back();
  return n.children.back();
}

// The msgpack-cxx packer's stream: the file being written.
struct FileStream {
  AtomicFile* file;
  void write(const char* data, size_t bytes) { file->write(data, bytes); }
};

using Packer = msgpack::packer<FileStream>;

void pack_key(Packer& pk, const std::string& key) {
  pk.pack_str(static_cast<uint32_t>(key.size()));
  pk.pack_str_body(key.data(), static_cast<uint32_t>(key.size()));
}

// One ext type 1 leaf: [shape, dtype name, bytes], the bytes from `fill` (at `offset` of the
// whole tensor's bytes, when this is a chunk).
void pack_array_leaf(Packer& pk, const Shape& shape, DType dtype, const std::vector<uint8_t>& bytes, uint64_t offset,
                     uint64_t nbytes) {
  msgpack::sbuffer header;
  msgpack::packer<msgpack::sbuffer> hp(header);
  hp.pack_array(3);
  hp.pack_array(static_cast<uint32_t>(shape.size()));
  for (int64_t d : shape) hp.pack_uint64(static_cast<uint64_t>(d));
  const std::string name = numpy_dtype_name(dtype);
  hp.pack_str(static_cast<uint32_t>(name.size()));
  hp.pack_str_body(name.data(), static_cast<uint32_t>(name.size()));
  hp.pack_bin(static_cast<uint32_t>(nbytes));
  pk.pack_ext(header.size() + nbytes, 1);
  pk.pack_ext_body(header.data(), header.size());
  pk.pack_ext_body(reinterpret_cast<const char*>(bytes.data() + offset), nbytes);
}

void pack_tensor(Packer& pk, const TensorToWrite& t, uint64_t max_chunk_bytes) {
  const uint64_t item = dtype_size(t.dtype);
  const uint64_t numel = static_cast<uint64_t>(shape_numel(t.shape));
  const uint64_t nbytes = numel * item;
  std::vector<uint8_t> bytes(nbytes);
  if (t.fill) t.fill(bytes.data(), nbytes);
  if (nbytes <= max_chunk_bytes) return pack_array_leaf(pk, t.shape, t.dtype, bytes, 0, nbytes);
  const uint64_t chunk = std::max<uint64_t>(1, max_chunk_bytes / item);  // elements (flax's _chunk)
  const uint64_t chunks = (numel + chunk - 1) / chunk;
  pk.pack_map(3);
  pack_key(pk, "__msgpack_chunked_array__");
  pk.pack_true();
  pack_key(pk, "shape");
  pk.pack_map(static_cast<uint32_t>(t.shape.size()));
  for (size_t i = 0; i < t.shape.size(); ++i) {
    pack_key(pk, std::to_string(i));
    pk.pack_uint64(static_cast<uint64_t>(t.shape[i]));
  }
  pack_key(pk, "chunks");
  pk.pack_map(static_cast<uint32_t>(chunks));
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t n = std::min(chunk, numel - c * chunk);
    pack_key(pk, std::to_string(c));
    pack_array_leaf(pk, {static_cast<int64_t>(n)}, t.dtype, bytes, c * chunk * item, n * item);
  }
}

void pack_node(Packer& pk, const Node& n, uint64_t max_chunk_bytes) {
  if (n.tensor) return pack_tensor(pk, *n.tensor, max_chunk_bytes);
  pk.pack_map(static_cast<uint32_t>(n.children.size()));
  for (size_t i = 0; i < n.children.size(); ++i) {
    pack_key(pk, n.child_names[i]);
    pack_node(pk, n.children[i], max_chunk_bytes);
  }
}

}  // namespace

const char* numpy_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::F64: return "float64";
    case DType::I8: return "int8";
    case DType::I16: return "int16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::U16: return "uint16";
    case DType::U32: return "uint32";
    case DType::U64: return "uint64";
    case DType::Bool: return "bool";
    default: fail("dtype ", dtype_name(dtype), " has no numpy name");
  }
}

void write_flax_msgpack(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                        uint64_t max_chunk_bytes) {
  Node root;
  for (const TensorToWrite& t : tensors) {
    Node* n = &root;
    size_t start = 0;
    for (size_t slash = t.name.find('/'); ; slash = t.name.find('/', start)) {
      const std::string part = t.name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      if (part.empty() || n->tensor) fail("cannot write '", path.string(), "': bad Flax path '", t.name, "'");
      n = &child(*n, part);
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    if (n->tensor || !n->children.empty()) fail("cannot write '", path.string(), "': '", t.name, "' is given twice");
    (void)numpy_dtype_name(t.dtype);
    n->tensor = &t;
  }
  AtomicFile out(path);
  FileStream stream{&out};
  Packer pk(stream);
  pack_node(pk, root, max_chunk_bytes);
  out.commit();
}

}  // namespace octodiff
