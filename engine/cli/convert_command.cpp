// octodiff-cli convert: a diffusers folder from safetensors to Flax msgpack or back, as
// diffusers' modeling_flax_pytorch_utils.py (torch → Flax) and modeling_pytorch_flax_utils.py
// (Flax → torch) name and lay out the weights. Tensors are read, rearranged and written one at a
// time; every other file of the folder (configs, tokenizer, scheduler) is copied as it is.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli/args.h"
#include "commands.h"
#include "core/error.h"
#include "core/half.h"
#include "io/files.h"
#include "io/flax_msgpack.h"
#include "pipeline/component_weights.h"

namespace octodiff::cli {
namespace fs = std::filesystem;

const char* kConvertUsage =
    "usage: octodiff-cli convert --to safetensors|flax [--dtype keep|f32|bf16] SRC DST\n\n"
    "Writes the diffusers folder SRC (safetensors or Flax msgpack weights) as a new folder DST\n"
    "in the other format: unet/ and vae/ diffusion_pytorch_model.safetensors <->\n"
    "diffusion_flax_model.msgpack, text_encoder/ (and safety_checker/ when present)\n"
    "model.safetensors <-> flax_model.msgpack,\n"
    "with Flax's names and layouts (HWIO conv kernels, (in, out) dense kernels, `scale`, `_N`).\n"
    "Every other file is copied. --dtype: keep each tensor's stored dtype (default), or store\n"
    "every floating-point tensor as f32 or bf16 (bf16 = Flax's revision=\"bf16\").\n";

namespace {

struct Component {
  const char* dir;
  const char* safetensors_file;  // the base name component_weight_files looks for, + ".safetensors"
  const char* flax_file;
  FlaxNaming naming;
};

constexpr Component kComponents[] = {
    {"text_encoder", "model", "flax_model.msgpack", FlaxNaming::Transformers},
    {"unet", "diffusion_pytorch_model", "diffusion_flax_model.msgpack", FlaxNaming::Diffusers},
    {"vae", "diffusion_pytorch_model", "diffusion_flax_model.msgpack", FlaxNaming::Diffusers},
    {"safety_checker", "model", "flax_model.msgpack", FlaxNaming::Transformers},  // when the folder has one
};

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64; }

// Fills `dst` with a float32 tensor in `dtype` (F32, BF16 or F16).
void store(const Tensor& t, DType dtype, uint8_t* dst) {
  const int64_t n = t.numel();
  if (dtype == DType::F32) return (void)std::memcpy(dst, t.data(), static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(t[i]) : f32_to_f16(t[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

DType output_dtype(DType stored, const std::string& choice) {
  if (choice == "f32") return DType::F32;
  if (choice == "bf16") return DType::BF16;
  return stored == DType::F64 ? DType::F32 : stored;
}

// One component's tensors, to be written in the target format; taken from `w` as the writer
// asks for each one.
std::vector<TensorToWrite> tensors_to_write(const std::shared_ptr<WeightSource>& w, const Component& c, bool to_flax,
                                            const std::string& dtype_choice) {
  std::vector<TensorToWrite> out;
  for (const std::string& name : w->names()) {
    const DType stored = w->stored_dtype(name);
    if (!is_float(stored)) {
      std::printf("  skipped %s (%s, not a parameter)\n", name.c_str(), dtype_name(stored));
      w->ignore(name);
      continue;
    }
    const Shape torch_shape = w->shape_of(name);
    const DType dtype = output_dtype(stored, dtype_choice);
    TorchParameter target{name, FlaxLayout::AsIs};
    if (to_flax) target = flax_parameter_for_torch(name, torch_shape.size(), c.naming, std::string(c.dir) == "vae");
    const Shape shape = to_flax ? flax_shape_of(torch_shape, target.layout) : torch_shape;
    out.push_back({target.name, dtype, shape, [w, name, torch_shape, dtype, layout = target.layout](uint8_t* dst, size_t) {
                     store(torch_to_flax_layout(w->take(name, torch_shape), layout), dtype, dst);
                   }});
  }
  return out;
}

void copy_other_files(const fs::path& src, const fs::path& dst) {
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    const fs::path rel = fs::relative(e.path(), src);
    if (e.is_directory()) {
      std::error_code ec;
      fs::create_directories(dst / rel, ec);
      if (ec) fail("cannot write '", (dst / rel).string(), "': ", ec.message());
      continue;
    }
    const std::string dir = rel.parent_path().string(), ext = e.path().extension().string();
    const bool weights = (ext == ".safetensors" || ext == ".msgpack") &&
                         (dir == "text_encoder" || dir == "unet" || dir == "vae" || dir == "safety_checker");
    if (!weights) copy_file_atomic(e.path(), dst / rel);
  }
}

}  // namespace

int run_convert(const std::vector<std::string>& argv) {
  Args args(argv, {"to", "dtype"}, {"help"});
  if (args.flag("help")) {
    std::printf("%s", kConvertUsage);
    return 0;
  }
  const std::string to = args.get_or("to", ""), dtype = args.get_or("dtype", "keep");
  if (to != "safetensors" && to != "flax") fail("--to must be safetensors or flax\n", kConvertUsage);
  if (dtype != "keep" && dtype != "f32" && dtype != "bf16") fail("--dtype must be keep, f32 or bf16");
  if (args.positional().size() != 2) fail("give SRC and DST folders\n", kConvertUsage);
  const fs::path src = args.positional()[0], dst = args.positional()[1];
  if (!fs::is_directory(src) || !fs::exists(src / "model_index.json"))
    fail("'", src.string(), "' is not a diffusers model folder (no model_index.json)");
  if (fs::exists(dst) && !fs::is_empty(dst)) fail("'", dst.string(), "' exists and is not empty");
  const bool to_flax = to == "flax";
  OutputFolder folder(dst);  // a conversion that fails part-way leaves nothing behind
  copy_other_files(src, dst);
  for (const Component& c : kComponents) {
    if (std::string(c.dir) == "safety_checker" && !fs::is_directory(src / c.dir)) continue;
    const ComponentWeights in = open_component_weights(src / c.dir, c.safetensors_file, c.flax_file, c.naming, "",
                                                       /*prefer_flax=*/!to_flax);
    const fs::path out = dst / c.dir / (to_flax ? std::string(c.flax_file) : std::string(c.safetensors_file) + ".safetensors");
    const auto tensors = tensors_to_write(in.source, c, to_flax, dtype);
    if (to_flax) write_flax_msgpack(out, tensors);
    else write_safetensors(out, tensors, {{"format", "pt"}});
    in.source->finish();
    std::printf("wrote %s (%zu tensors, from %s)\n", out.string().c_str(), tensors.size(),
                in.files.front().filename().string().c_str());
  }
  folder.keep();
  return 0;
}

}  // namespace octodiff::cli
