#include "pipeline/autoencoder_tiny_loader.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/weight_source.h"
#include "models/layers.h"
#include "pipeline/model.h"

namespace octodiff {
namespace fs = std::filesystem;

namespace {

constexpr const char* kDecoderSuffix = "_decoder.safetensors";
constexpr const char* kEncoderSuffix = "_encoder.safetensors";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- (a) the diffusers folder ----

AutoencoderTinyConfig read_diffusers_config(const fs::path& file) {
  const std::string text = read_text_file(file);
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.is_object() && j.contains("_class_name") && j["_class_name"] != "AutoencoderTiny")
      fail("'", file.string(), "' describes a model of class ", j["_class_name"].dump(),
           ", not an AutoencoderTiny (TAESD)");
  } catch (const nlohmann::json::exception&) {
    // from_json reports malformed JSON with the file's name
  }
  return AutoencoderTinyConfig::from_json(text, file.string());
}

AutoencoderTiny load_diffusers_folder(const fs::path& dir, kernels::Precision precision) {
  const AutoencoderTinyConfig config = read_diffusers_config(dir / "config.json");
  const auto files = component_weight_files(dir, "diffusion_pytorch_model", "");
  const std::string what = files.size() == 1 ? cat("'", files[0].string(), "'")
                                             : cat("'", dir.string(), "' (", files.size(), " shards)");
  auto weights = weights_from_safetensors(files, what);
  return AutoencoderTiny::load(*weights, config, precision);
}

// ---- (b) madebyollin's single files ----

// One of madebyollin's files: its tensors by Sequential index, renamed to diffusers' names.
struct SequentialFile {
  fs::path path;
  std::shared_ptr<SafetensorsFile> file;
  std::map<int, std::vector<const TensorRecord*>> by_index;  // keys "<index>.<rest>"
  int max_index = -1;

  bool has(int index, const std::string& rest) const { return file->find(cat(index, ".", rest)) != nullptr; }
  bool has_any(int index) const { return by_index.count(index) != 0; }
  // The 4-D weight at `<index>.weight`, or an error naming what the layer list needs there.
  const Shape& conv_weight(int index, const char* role) const {
    const TensorRecord* r = file->find(cat(index, ".weight"));
    if (!r || r->shape.size() != 4)
      fail("'", path.string(), "' is not a TAESD file in madebyollin's layout: expected ", role, " '", index,
           ".weight' (out, in, 3, 3)", r ? cat(", found shape ", shape_str(r->shape)) : std::string());
    return r->shape;
  }
};

SequentialFile open_sequential(const fs::path& path) {
  SequentialFile f;
  f.path = path;
  f.file = SafetensorsFile::open(path);
  for (const auto& rec : f.file->tensors()) {
    const std::string& name = rec.name;
    int index = -1;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), index);
    if (ec != std::errc() || end == name.data() + name.size() || *end != '.' || index < 0) continue;
    f.by_index[index].push_back(&rec);
    f.max_index = std::max(f.max_index, index);
  }
  if (f.max_index < 0)
    fail("'", path.string(), "' is not a TAESD file in madebyollin's layout (no tensors named '<layer index>.…')");
  return f;
}

// A WeightSource under diffusers' names: key "<K>.<rest>" → "<half>.layers.<K - offset>.<rest>".
// Keys that are not "<index>.…" keep their name, so finish() reports them as unexpected.
std::shared_ptr<WeightSource> renamed_source(const SequentialFile& f, const char* half, int offset) {
  auto src = std::make_shared<WeightSource>(
      cat("'", f.path.string(), "' (madebyollin's layout: key ", offset ? "K+1" : "K", " is diffusers' ", half,
          ".layers.K)"));
  std::map<const TensorRecord*, int> index_of;
  for (const auto& [index, records] : f.by_index)
    for (const TensorRecord* r : records) index_of[r] = index;
  for (const auto& rec : f.file->tensors()) {
    WeightSource::Entry e;
    e.file = f.file;
    e.record = &rec;
    e.shape = rec.shape;
    e.origin = rec.name;
    std::string name = rec.name;
    if (auto it = index_of.find(&rec); it != index_of.end()) {
      const std::string rest = rec.name.substr(rec.name.find('.') + 1);
      name = it->second - offset >= 0 ? cat(half, ".layers.", it->second - offset, ".", rest) : rec.name;
    }
    src->add(name, e);
  }
  return src;
}

// The decoder's layer list: 0 Clamp, 1 conv(L→C), 2 ReLU, then per stage its blocks and either
// Upsample + conv (two indices) or, at the last index, the output conv.
void infer_decoder(const SequentialFile& f, AutoencoderTinyConfig* c) {
  const Shape& first = f.conv_weight(1, "the decoder's first convolution");
  const Shape& last = f.conv_weight(f.max_index, "the decoder's output convolution");
  c->latent_channels = static_cast<int>(first[1]);
  c->out_channels = static_cast<int>(last[0]);
  std::vector<int> blocks{0};
  for (int i = 3; i < f.max_index;) {
    if (f.has(i, "conv.0.weight")) {
      ++blocks.back();
      ++i;
    } else if (!f.has_any(i) && f.has(i + 1, "weight") && i + 1 < f.max_index) {
      blocks.push_back(0);  // Upsample at i, conv at i + 1
      i += 2;
    } else {
      fail("'", f.path.string(), "' is not a TAESD decoder in madebyollin's layout: cannot read layer ", i,
           " (expected a block '", i, ".conv.0.weight' or an upsampling step followed by '", i + 1, ".weight')");
    }
  }
  c->decoder_block_out_channels.assign(blocks.size(), static_cast<int>(first[0]));
  c->num_decoder_blocks = blocks;
}

// The encoder's layer list: 0 conv(in→C), then blocks, each later stage opened by a stride-2
// conv, and the output conv(C→L) at the last index.
void infer_encoder(const SequentialFile& f, AutoencoderTinyConfig* c) {
  const Shape& first = f.conv_weight(0, "the encoder's first convolution");
  const Shape& last = f.conv_weight(f.max_index, "the encoder's output convolution");
  c->in_channels = static_cast<int>(first[1]);
  std::vector<int> blocks{0};
  for (int i = 1; i < f.max_index; ++i) {
    if (f.has(i, "conv.0.weight"))
      ++blocks.back();
    else if (f.has(i, "weight"))
      blocks.push_back(0);  // stride-2 conv
    else
      fail("'", f.path.string(), "' is not a TAESD encoder in madebyollin's layout: nothing at layer ", i);
  }
  c->encoder_block_out_channels.assign(blocks.size(), static_cast<int>(first[0]));
  c->num_encoder_blocks = blocks;
  if (last[0] != c->latent_channels)
    fail("'", f.path.string(), "' makes ", last[0], " latent channels but its decoder takes ", c->latent_channels);
}

AutoencoderTiny load_single_files(const fs::path& decoder_path, const std::optional<fs::path>& encoder_path,
                                  kernels::Precision precision) {
  AutoencoderTinyConfig config;
  const SequentialFile dec = open_sequential(decoder_path);
  infer_decoder(dec, &config);
  std::optional<SequentialFile> enc;
  if (encoder_path) {
    enc = open_sequential(*encoder_path);
    infer_encoder(*enc, &config);
  } else {  // no encoder: its settings only need to be valid
    config.encoder_block_out_channels.assign(config.num_encoder_blocks.size(), config.channels());
  }
  config.validate(encoder_path ? cat("'", decoder_path.string(), "' + '", encoder_path->string(), "'")
                               : cat("'", decoder_path.string(), "'"));
  auto dec_w = renamed_source(dec, "decoder", 1);
  auto enc_w = enc ? renamed_source(*enc, "encoder", 0) : nullptr;
  return AutoencoderTiny::load(*dec_w, enc_w.get(), config, precision);
}

// Which files a path names: (decoder, encoder if any).
std::pair<fs::path, std::optional<fs::path>> single_file_pair(const fs::path& path) {
  const std::string name = path.filename().string();
  auto partner = [&](const char* from, const char* to) {
    return path.parent_path() / (name.substr(0, name.size() - std::string(from).size()) + to);
  };
  if (ends_with(name, kDecoderSuffix)) {
    const fs::path enc = partner(kDecoderSuffix, kEncoderSuffix);
    return {path, fs::exists(enc) ? std::optional<fs::path>(enc) : std::nullopt};
  }
  if (ends_with(name, kEncoderSuffix)) {
    const fs::path dec = partner(kEncoderSuffix, kDecoderSuffix);
    if (!fs::exists(dec))
      fail("'", path.string(), "' is a TAESD encoder; its decoder '", dec.filename().string(),
           "' must be beside it (the decoder is required)");
    return {dec, path};
  }
  if (path.extension() == ".pth" || path.extension() == ".pt" || path.extension() == ".ckpt")
    fail("'", path.string(), "': Octodiff loads .safetensors only (pickled .pth/.pt/.ckpt files can run code); "
         "madebyollin publishes the same weights as <name>_decoder.safetensors / <name>_encoder.safetensors");
  fail("'", path.string(), "' is not a tiny autoencoder: give a diffusers AutoencoderTiny folder (config.json + "
       "diffusion_pytorch_model.safetensors) or madebyollin's <name>_decoder.safetensors (and _encoder) file or folder");
}

fs::path find_decoder_in(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && ends_with(e.path().filename().string(), kDecoderSuffix)) found.push_back(e.path());
  std::sort(found.begin(), found.end());
  if (found.empty())
    fail("'", dir.string(), "' is not a tiny autoencoder folder: it has neither config.json (diffusers) nor a "
         "<name>", kDecoderSuffix, " file (madebyollin)");
  if (found.size() > 1) {
    std::string list;
    for (const auto& f : found) list += (list.empty() ? "'" : ", '") + f.filename().string() + "'";
    fail("'", dir.string(), "' holds several tiny autoencoder decoders (", list, "); give the file to use");
  }
  return found[0];
}

}  // namespace

ComputeDType tiny_autoencoder_dtype(ComputeDType requested, bool bf16_products_native) {
  return requested == ComputeDType::BF16 && bf16_products_native ? ComputeDType::BF16 : ComputeDType::F32;
}

std::shared_ptr<const AutoencoderTiny> load_autoencoder_tiny(const fs::path& path, ComputeDType dtype) {
  if (!fs::exists(path)) fail("tiny autoencoder '", path.string(), "' does not exist");
  const kernels::Precision precision = dtype == ComputeDType::BF16 ? kernels::Precision::BF16 : kernels::Precision::F32;
  struct ReleaseScratch {
    ~ReleaseScratch() { release_packing_scratch(); }
  } release_scratch;
  if (fs::is_directory(path)) {
    if (fs::exists(path / "config.json"))
      return std::make_shared<const AutoencoderTiny>(load_diffusers_folder(path, precision));
    const auto [decoder, encoder] = single_file_pair(find_decoder_in(path));
    return std::make_shared<const AutoencoderTiny>(load_single_files(decoder, encoder, precision));
  }
  const auto [decoder, encoder] = single_file_pair(path);
  return std::make_shared<const AutoencoderTiny>(load_single_files(decoder, encoder, precision));
}

}  // namespace octodiff
