// Flax msgpack weights: a validated reader of flax.serialization.to_bytes files
// (diffusers' diffusion_flax_model.msgpack, transformers' flax_model.msgpack) and the mapping of
// their parameter names and layouts onto the PyTorch names the models load.
//
// The format: a msgpack map of nested maps with string keys; every array leaf is msgpack ext
// type 1 whose payload is itself msgpack: [shape (array of ints), dtype name ("float32",
// "bfloat16", …), raw C-order bytes (bin)]; ext 3 is a numpy scalar (same payload). A leaf over
// 2^30 bytes is stored as {"__msgpack_chunked_array__": true, "shape": {"0": …}, "chunks":
// {"0": flat leaf, …}}. The reader walks the outer structure with msgpack-cxx's visitor parser
// (no object tree: only keys are copied, array bytes stay in the file's mapping), bounds the
// nesting depth, refuses duplicate keys, arrays where Flax writes maps, and every leaf that is
// not an array; every shape × dtype size is overflow-checked against the payload's byte count.
// Errors are octodiff::Error naming the file and the tensor's path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace octodiff {

class WeightSource;

struct FlaxMsgpackLimits {
  static constexpr int kMaxDepth = 32;            // nested maps (SD's deepest path has 7 levels)
  static constexpr size_t kMaxKeyBytes = 1024;    // one map key
  static constexpr size_t kMaxDims = 16;          // dimensions of one array
};

// The array leaves of the file held in [data, data + size), in file order, named by their
// '/'-joined path ("down_blocks_0/resnets_0/conv1/kernel"), with byte offsets counted from
// `data`; a chunked leaf is one record whose pieces are its chunks. `what` names the file.
std::vector<TensorRecord> parse_flax_msgpack(const uint8_t* data, uint64_t size, const std::string& what);

// Maps and parses a file: its tensors under their Flax paths, as a SafetensorsFile view.
std::shared_ptr<SafetensorsFile> open_flax_msgpack(const std::filesystem::path& path);

// Who wrote the file decides its naming: diffusers (UNet, VAE: `name_N` list indices, the VAE
// attention's query/key/value/proj_attn) or transformers (text encoders: `layers/0`).
enum class FlaxNaming { Diffusers, Transformers };

// How a Flax parameter is laid out relative to its PyTorch tensor.
enum class FlaxLayout {
  AsIs,
  DenseKernel,  // Flax (in, out), torch (out, in)
  ConvKernel,   // Flax HWIO, torch OIHW (transpose (3, 2, 0, 1))
};

struct TorchParameter {
  std::string name;  // e.g. "down_blocks.0.resnets.0.conv1.weight"
  FlaxLayout layout = FlaxLayout::AsIs;
};

// The PyTorch name and layout of the Flax parameter at `flax_path` with `ndim` dimensions
// (modeling_pytorch_flax_utils.py's rules, keeping `linear_N` as diffusers' time embedding
// does). Throws for a kernel that is neither 2-D nor 4-D.
TorchParameter torch_parameter_for_flax(const std::string& flax_path, size_t ndim, FlaxNaming naming);
// The inverse (modeling_flax_pytorch_utils.py): the Flax path of a PyTorch parameter with `ndim`
// dimensions; `vae` renames the attention's to_q/to_k/to_v/to_out.0 as FlaxAttentionBlock does.
TorchParameter flax_parameter_for_torch(const std::string& torch_name, size_t ndim, FlaxNaming naming, bool vae);

Shape torch_shape_of(const Shape& flax_shape, FlaxLayout layout);
Shape flax_shape_of(const Shape& torch_shape, FlaxLayout layout);
// A float32 tensor in Flax layout, rearranged to torch layout, and back.
Tensor flax_to_torch_layout(const Tensor& flax, FlaxLayout layout);
Tensor torch_to_flax_layout(const Tensor& torch, FlaxLayout layout);

// Every tensor of a Flax msgpack file under its PyTorch name and shape (the layout change is
// the entry's transform, applied one tensor at a time as the model takes it).
std::shared_ptr<WeightSource> weights_from_flax_msgpack(const std::filesystem::path& file, FlaxNaming naming,
                                                        const std::string& description);

}  // namespace octodiff

namespace octodiff {

// Writes tensors as flax.serialization.to_bytes does: `name` is the Flax path ("a/b/kernel"),
// nested into maps in the order the tensors come; a tensor over `max_chunk_bytes` (Flax: 2^30)
// becomes a chunked leaf. Atomic (AtomicFile); errors name the file and the tensor.
void write_flax_msgpack(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                        uint64_t max_chunk_bytes = uint64_t{1} << 30);

// numpy's name for a dtype ("float32", "bfloat16", …), as Flax writes it.
const char* numpy_dtype_name(DType dtype);

}  // namespace octodiff
