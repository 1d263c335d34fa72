#include "pipeline/controlnet.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "io/files.h"
#include "io/single_file.h"
#include "io/weight_source.h"
#include "kernels/activations.h"
#include "models/layers.h"
#include "pipeline/image_to_image.h"
#include "pipeline/model.h"

namespace octodiff {
namespace fs = std::filesystem;

namespace {

// Dimension k of a tensor the configuration is read from, or an error naming it.
int64_t dim_of(const WeightSource& w, const std::string& name, size_t k, const std::string& what) {
  if (!w.has(name)) fail(what, ": the ControlNet lacks '", name, "'");
  const Shape& s = w.shape_of(name);
  if (s.size() <= k) fail(what, ": '", name, "' has shape ", shape_str(s));
  return s[k];
}

int count_prefixed(const WeightSource& w, const std::string& prefix) {
  int n = 0;
  while (w.has(cat(prefix, n, ".weight")) || w.has(cat(prefix, n, ".norm1.weight")) ||
         w.has(cat(prefix, n, ".conv1.weight")))
    ++n;
  return n;
}

int transformer_depth(const WeightSource& w, const std::string& attention) {
  int n = 0;
  while (w.has(cat(attention, ".transformer_blocks.", n, ".norm1.weight"))) ++n;
  return n;
}

}  // namespace

ControlNetConfig controlnet_config_from_weights(const WeightSource& w, const std::string& what) {
  // An SDXL ControlNet's add_embedding (label_emb) does not say how wide its size ids' sinusoids
  // are (addition_time_embed_dim): its diffusers folder's config.json does.
  if (w.has("add_embedding.linear_1.weight"))
    fail(what, ": an SDXL ControlNet (it has an add_embedding, 'label_emb') in a single file; Octodiff reads SDXL "
               "ControlNets from diffusers folders (config.json + diffusion_pytorch_model.safetensors)");
  ControlNetConfig c;
  UNetConfig& u = c.unet;
  u.in_channels = static_cast<int>(dim_of(w, "conv_in.weight", 1, what));
  int levels = 0;
  while (w.has(cat("down_blocks.", levels, ".resnets.0.conv1.weight"))) ++levels;
  if (levels == 0) fail(what, ": the ControlNet has no down_blocks.0.resnets.0 tensors");
  u.layers_per_block = count_prefixed(w, "down_blocks.0.resnets.");
  const std::string mid = "mid_block.attentions.0";
  u.cross_attention_dim = static_cast<int>(dim_of(w, mid + ".transformer_blocks.0.attn2.to_k.weight", 1, what));
  u.use_linear_projection = w.has(mid + ".proj_in.weight") && w.shape_of(mid + ".proj_in.weight").size() == 2;
  u.block_out_channels.clear();
  u.down_block_types.clear();
  u.up_block_types.clear();
  u.num_heads.clear();
  u.transformer_layers_per_block.clear();
  for (int i = 0; i < levels; ++i) {
    const int ch = static_cast<int>(dim_of(w, cat("down_blocks.", i, ".resnets.0.conv1.weight"), 0, what));
    const std::string attention = cat("down_blocks.", i, ".attentions.0");
    const bool cross = w.has(attention + ".proj_in.weight");
    u.block_out_channels.push_back(ch);
    u.down_block_types.push_back(cross ? "CrossAttnDownBlock2D" : "DownBlock2D");
    u.up_block_types.insert(u.up_block_types.begin(), cross ? "CrossAttnUpBlock2D" : "UpBlock2D");
    // SD 2.x (OpenCLIP, 1024) uses 64 channels per head; SD 1.x 8 heads.
    u.num_heads.push_back(u.cross_attention_dim == 1024 ? std::max(1, ch / 64) : 8);
    u.transformer_layers_per_block.push_back(cross ? std::max(1, transformer_depth(w, attention)) : 1);
  }
  // The mid block's transformer takes the last level's depth (diffusers' transformer_layers_per_block[-1]).
  u.transformer_layers_per_block.back() = std::max(1, transformer_depth(w, mid));
  const std::string e = "controlnet_cond_embedding.";
  c.conditioning_channels = static_cast<int>(dim_of(w, e + "conv_in.weight", 1, what));
  c.conditioning_embedding_out_channels = {static_cast<int>(dim_of(w, e + "conv_in.weight", 0, what))};
  for (int k = 1; w.has(cat(e, "blocks.", k, ".weight")); k += 2)
    c.conditioning_embedding_out_channels.push_back(static_cast<int>(dim_of(w, cat(e, "blocks.", k, ".weight"), 0, what)));
  return c;
}

std::shared_ptr<const ControlNetModel> load_controlnet(const fs::path& path, ComputeDType dtype) {
  if (!fs::exists(path)) fail("ControlNet '", path.string(), "' does not exist");
  const kernels::Precision precision = dtype == ComputeDType::BF16 ? kernels::Precision::BF16 : kernels::Precision::F32;
  struct ReleaseScratch {
    ~ReleaseScratch() { release_packing_scratch(); }
  } release_scratch;
  if (fs::is_directory(path)) {
    const fs::path config_file = path / "config.json";
    if (!fs::exists(config_file))
      fail("'", path.string(), "' is not a diffusers ControlNet folder: it has no config.json");
    const ControlNetConfig config = ControlNetConfig::from_json(read_text_file(config_file), config_file.string());
    const auto files = component_weight_files(path, "diffusion_pytorch_model", "");
    const std::string what = files.size() == 1 ? cat("'", files[0].string(), "'")
                                               : cat("'", path.string(), "' (", files.size(), " shards)");
    auto weights = weights_from_safetensors(files, what);
    return std::make_shared<const ControlNetModel>(ControlNetModel::load(*weights, config, precision));
  }
  if (path.extension() != ".safetensors")
    fail("'", path.string(), "': Octodiff loads ControlNets from .safetensors files or diffusers folders only "
         "(pickled .pth/.ckpt files can run code)");
  auto weights = open_controlnet_single_file(path);
  const ControlNetConfig config = controlnet_config_from_weights(*weights, cat("'", path.string(), "'"));
  return std::make_shared<const ControlNetModel>(ControlNetModel::load(*weights, config, precision));
}

double controlnet_keep(int i, int n, double start, double end) {
  const double di = static_cast<double>(i), dn = static_cast<double>(n);
  return 1.0 - static_cast<double>(di / dn < start || (di + 1) / dn > end);
}

void resolve_controlnets(GenerationRequest& req, const UNetConfig& unet, int vae_scale_factor, int devices,
                         int* height, int* width) {
  const int multiple = req.compat == Compat::Flax ? 64 : vae_scale_factor;
  for (size_t k = 0; k < req.controlnets.size(); ++k) {
    ControlNetUse& use = req.controlnets[k];
    const std::string what = cat("ControlNet ", k + 1, use.name.empty() ? "" : cat(" ('", use.name, "')"));
    if (!use.model) fail(what, " has no model loaded");
    const auto precision = req.dtype == ComputeDType::BF16 ? kernels::Precision::BF16 : kernels::Precision::F32;
    if (use.model->precision() != precision)
      fail(what, " was loaded for another dtype than the request's ", dtype_display_name(req.dtype),
           " (load it with the same dtype as the model)");
    const ControlNetConfig& c = use.model->config();
    if (const std::string m = c.mismatch_with(unet); !m.empty()) {
      auto family = [](const UNetConfig& u) { return u.text_time() ? "SDXL" : "SD 1.x/2.x"; };
      const std::string families = c.unet.text_time() == unet.text_time()
                                       ? std::string()
                                       : cat(" (an ", family(c.unet), " ControlNet on an ", family(unet), " model)");
      fail(what, " is for another architecture than this model's UNet", families, ": ", m);
    }
    if (c.image_scale() != vae_scale_factor)
      fail(what, " reads control images at ", c.image_scale(), "× the latent size; this model's VAE scale is ",
           vae_scale_factor, " (a ControlNet for another model family?)");
    if (c.conditioning_channels != 3) fail(what, " takes ", c.conditioning_channels, "-channel control images; only RGB (3) is supported");
    if (!std::isfinite(use.scale)) fail(what, ": the conditioning scale must be a finite number");
    if (!(use.guidance_start >= 0 && use.guidance_start < use.guidance_end && use.guidance_end <= 1))
      fail(what, ": control guidance start ", use.guidance_start, " and end ", use.guidance_end,
           " must satisfy 0 <= start < end <= 1");
    const int n = static_cast<int>(use.images.size());
    if (n != 1 && n != devices)
      fail(what, " has ", n, " control images for ", devices, " devices (give 1 for every device or one per device)");
    for (Image8& image : use.images) {
      check_image_size(image.width, image.height, "control image");
      if (!*width || !*height) {  // the first image decides the size
        const int w = image.width - image.width % multiple, h = image.height - image.height % multiple;
        if (w <= 0 || h <= 0)
          fail(what, ": the control image is ", image.width, "×", image.height, "; it needs at least ", multiple,
               " pixels per side");
        *width = *width ? *width : w;
        *height = *height ? *height : h;
      }
      if (image.width != *width || image.height != *height) image = resize_lanczos(image, *width, *height);
    }
  }
}

Tensor device_control_images(const std::vector<Image8>& images, int device, int batch, bool guided) {
  const Image8& image = images.size() == 1 ? images[0] : images.at(device);
  const int64_t pixels = int64_t{image.width} * image.height;
  const int copies = guided ? 2 * batch : batch;
  Tensor out = Tensor::empty({copies, image.height, image.width, 3});
  for (int64_t k = 0; k < pixels * 3; ++k) out[k] = static_cast<float>(image.rgb[k]) / 255.0f;
  for (int b = 1; b < copies; ++b) std::memcpy(out.data() + b * pixels * 3, out.data(), sizeof(float) * pixels * 3);
  return out;
}

namespace {

// a += b, tensor by tensor (MultiControlNetModel's sum).
void accumulate(UNetResiduals& a, const UNetResiduals& b) {
  for (size_t k = 0; k < a.down.size(); ++k) kernels::add(a.down[k].data(), b.down[k].data(), a.down[k].numel(), a.down[k].data());
  kernels::add(a.mid.data(), b.mid.data(), a.mid.numel(), a.mid.data());
}

}  // namespace

ResidualProvider controlnet_residuals(const std::vector<ControlNetUse>& uses, int device, int batch, bool guided,
                                      int first_call, int calls, const Numerics& numerics,
                                      const UNetTextTime* text_time) {
  if (uses.empty()) return {};
  struct Net {
    const ControlNetUse* use;
    Tensor embedded;  // (2B or B) × h × w × C0: the images' conditioning embedding, made at the first call
  };
  auto nets = std::make_shared<std::vector<Net>>();
  for (const ControlNetUse& use : uses) nets->push_back({&use, Tensor()});
  return [nets, device, batch, guided, first_call, calls, numerics, text_time](
             int call, double t, const Tensor& input, const Tensor& context) -> std::optional<UNetResiduals> {
    std::optional<UNetResiduals> sum;
    const std::vector<double> timesteps(input.dim(0), t);
    for (Net& net : *nets) {
      const ControlNetUse& use = *net.use;
      const double keep = controlnet_keep(call - first_call, calls - first_call, use.guidance_start, use.guidance_end);
      if (keep == 0.0) continue;
      if (net.embedded.rank() == 0) {  // once per run: the B images, repeated for the guided batch's halves
        const Tensor once = use.model->embed_condition(device_control_images(use.images, device, batch, false));
        std::vector<int64_t> rows;
        for (int copy = 0; copy < (guided ? 2 : 1); ++copy)
          for (int b = 0; b < batch; ++b) rows.push_back(b);
        net.embedded = once.gather0(rows);
      }
      UNetResiduals r = use.model->forward_embedded_nhwc(input, timesteps, context, net.embedded, use.scale * keep,
                                                         numerics, text_time);
      if (sum)
        accumulate(*sum, r);
      else
        sum = std::move(r);
    }
    return sum;
  };
}

}  // namespace octodiff
