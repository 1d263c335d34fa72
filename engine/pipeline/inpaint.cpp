#include "pipeline/inpaint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/tensor_ops.h"
#include "pipeline/image_to_image.h"
#include "pipeline/latents.h"

#pragma GCC optimize("fp-contract=off")

namespace octodiff {

std::string inpaint_mode_name(InpaintMode mode) {
  return mode == InpaintMode::UNetChannels ? "9-channel unet" : "latent blend";
}

InpaintMode inpaint_mode_for(int unet_in_channels, int latent_channels) {
  if (unet_in_channels == latent_channels) return InpaintMode::LatentBlend;
  if (unet_in_channels == 2 * latent_channels + 1) return InpaintMode::UNetChannels;
  fail("this UNet takes ", unet_in_channels, " input channels; inpainting needs ", latent_channels,
       " (an ordinary model: latent blend) or ", latent_channels, " latents + 1 mask + ", latent_channels,
       " masked-image latents = ", 2 * latent_channels + 1, " (an inpainting model)");
}

// ---- grey masks ---------------------------------------------------------------------------------

GrayImage to_gray(const Image8& rgb) {
  GrayImage g{rgb.width, rgb.height, std::vector<uint8_t>(size_t(rgb.width) * rgb.height)};
  for (size_t p = 0; p < g.values.size(); ++p) {
    const uint32_t r = rgb.rgb[3 * p], gr = rgb.rgb[3 * p + 1], b = rgb.rgb[3 * p + 2];
    g.values[p] = static_cast<uint8_t>((r * 19595 + gr * 38470 + b * 7471 + 0x8000) >> 16);
  }
  return g;
}

namespace {

// OpenCV's BORDER_REFLECT_101 index (gfedcb|abcdefgh|gfedcba) for any i.
int reflect101(int i, int n) {
  if (n == 1) return 0;
  const int period = 2 * (n - 1);
  i = ((i % period) + period) % period;
  return i < n ? i : period - i;
}

// One pass of a 1-D kernel along x (dx = 1) or y (dx = 0), rounded to 8 bits as cv2 does on uint8.
GrayImage convolve(const GrayImage& in, const std::vector<double>& k, bool along_x) {
  GrayImage out = in;
  const int r = static_cast<int>(k.size() / 2);
  for (int y = 0; y < in.height; ++y)
    for (int x = 0; x < in.width; ++x) {
      double sum = 0;
      for (int t = -r; t <= r; ++t) {
        const int sx = along_x ? reflect101(x + t, in.width) : x, sy = along_x ? y : reflect101(y + t, in.height);
        sum += k[t + r] * in.values[size_t(sy) * in.width + sx];
      }
      out.values[size_t(y) * in.width + x] = static_cast<uint8_t>(std::clamp(std::lround(sum), 0L, 255L));
    }
  return out;
}

}  // namespace

GrayImage blur_mask(const GrayImage& mask, int radius) {
  if (radius < 0) fail("mask blur must be 0 or more pixels, got ", radius);
  if (radius == 0) return mask;
  // A1111: cv2.GaussianBlur(mask, (2·int(2.5σ + 0.5) + 1, 1), σ), then the same vertically.
  const int taps = 2 * static_cast<int>(2.5 * radius + 0.5) + 1, r = taps / 2;
  std::vector<double> k(taps);
  double total = 0;
  for (int t = 0; t < taps; ++t) total += k[t] = std::exp(-double(t - r) * (t - r) / (2.0 * radius * radius));
  for (double& v : k) v /= total;
  return convolve(convolve(mask, k, true), k, false);
}

GrayImage resize_gray(const GrayImage& mask, int width, int height) {
  if (mask.width == width && mask.height == height) return mask;
  Image8 rgb{mask.width, mask.height, std::vector<uint8_t>(mask.values.size() * 3)};
  for (size_t p = 0; p < mask.values.size(); ++p) rgb.rgb[3 * p] = rgb.rgb[3 * p + 1] = rgb.rgb[3 * p + 2] = mask.values[p];
  const Image8 resized = resize_lanczos(rgb, width, height);
  GrayImage out{width, height, std::vector<uint8_t>(size_t(width) * height)};
  for (size_t p = 0; p < out.values.size(); ++p) out.values[p] = resized.rgb[3 * p];
  return out;
}

namespace {

// Grows [lo, hi) by `diff` ≥ 0 pixels (half before), then shifts it back inside [0, n).
void expand_span(int* lo, int* hi, int diff, int n) {
  *lo -= diff / 2;
  *hi += diff - diff / 2;
  if (*hi >= n) {
    const int over = *hi - n;
    *hi -= over;
    *lo -= over;
  }
  if (*lo < 0) {
    *hi -= *lo;
    *lo = 0;
  }
  if (*hi >= n) *hi = n;
}

// Python's int() of a float (truncation) of a difference that may be negative.
int py_int(double v) { return static_cast<int>(std::trunc(v)); }

}  // namespace

CropBox mask_crop_region(const GrayImage& mask, int width, int height, int pad) {
  const int w = mask.width, h = mask.height;
  auto column_empty = [&](int x) {
    for (int y = 0; y < h; ++y)
      if (mask.values[size_t(y) * w + x]) return false;
    return true;
  };
  auto row_empty = [&](int y) {
    for (int x = 0; x < w; ++x)
      if (mask.values[size_t(y) * w + x]) return false;
    return true;
  };
  int left = 0, right = 0, top = 0, bottom = 0;
  while (left < w && column_empty(left)) ++left;
  while (right < w && column_empty(w - 1 - right)) ++right;
  while (top < h && row_empty(top)) ++top;
  while (bottom < h && row_empty(h - 1 - bottom)) ++bottom;
  CropBox b{std::max(left - pad, 0), std::max(top - pad, 0), std::min(w - right + pad, w), std::min(h - bottom + pad, h)};
  const double ratio_crop = double(b.width()) / b.height(), ratio = double(width) / height;
  if (ratio_crop > ratio) {
    const int diff = py_int(b.width() / ratio - b.height());
    expand_span(&b.y1, &b.y2, diff, h);
  } else {
    const int diff = py_int(b.height() * ratio - b.width());
    expand_span(&b.x1, &b.x2, diff, w);
  }
  return b;
}

}  // namespace octodiff

namespace octodiff {
namespace {

Image8 crop_image(const Image8& im, const CropBox& b) {
  Image8 out{b.width(), b.height(), std::vector<uint8_t>(size_t(b.width()) * b.height() * 3)};
  for (int y = 0; y < b.height(); ++y)
    std::memcpy(&out.rgb[size_t(y) * b.width() * 3], &im.rgb[(size_t(y + b.y1) * im.width + b.x1) * 3],
                size_t(b.width()) * 3);
  return out;
}

GrayImage crop_gray(const GrayImage& g, const CropBox& b) {
  GrayImage out{b.width(), b.height(), std::vector<uint8_t>(size_t(b.width()) * b.height())};
  for (int y = 0; y < b.height(); ++y)
    std::memcpy(&out.values[size_t(y) * b.width()], &g.values[size_t(y + b.y1) * g.width + b.x1], b.width());
  return out;
}

// (H, W): 1 where v/255 ≥ 0.5 in float32 (the pipelines' binarisation of a mask in [0, 1]).
Tensor binarise(const GrayImage& g) {
  Tensor out = Tensor::empty({g.height, g.width});
  for (size_t p = 0; p < g.values.size(); ++p) out[p] = static_cast<float>(g.values[p]) / 255.0f >= 0.5f ? 1.0f : 0.0f;
  return out;
}

bool all_zero(const Tensor& t) {
  return std::all_of(t.data(), t.data() + t.numel(), [](float v) { return v == 0.0f; });
}

// Mask k of the run (k < max(masks, init images)), its init image before and after preprocessing.
PreparedMask prepare_mask(const GenerationRequest& req, int k, const Image8& original, Image8& init) {
  const int n = static_cast<int>(req.masks.size());
  const Image8& mask = req.masks[n == 1 ? 0 : k];
  const std::string what = cat("mask ", (n == 1 ? 0 : k) + 1);
  if (mask.width != original.width || mask.height != original.height)
    fail(what, " is ", mask.width, "×", mask.height, " pixels but its init image is ", original.width, "×",
         original.height, " (a mask must have the size of the image it masks)");
  PreparedMask pm;
  GrayImage soft = resize_gray(blur_mask(to_gray(mask), req.mask_blur), init.width, init.height);
  if (all_zero(binarise(soft)))
    fail(what, " is entirely black after blur and binarisation at 0.5 (white = repaint): nothing would be "
               "repainted; paint the area to change, or leave the mask out for image-to-image");
  pm.box = {0, 0, init.width, init.height};
  if (req.inpaint_only_masked) {
    pm.box = mask_crop_region(soft, init.width, init.height, req.only_masked_padding);
    pm.paste_onto = init;
    pm.paste_alpha = soft;
    init = resize_lanczos(crop_image(init, pm.box), init.width, init.height);
    soft = resize_gray(crop_gray(soft, pm.box), init.width, init.height);
  } else if (req.mask_blur > 0) {
    pm.paste_onto = init;
    pm.paste_alpha = soft;
  }
  pm.binary = binarise(soft);
  pm.soft = std::move(soft);
  return pm;
}

}  // namespace

InpaintInputs resolve_inpaint(const GenerationRequest& req, const std::vector<Image8>& originals,
                              std::vector<Image8>& init_images, int devices, InpaintMode mode) {
  const int n = static_cast<int>(req.masks.size()), ni = static_cast<int>(init_images.size());
  if (ni == 0) fail("a mask was given but no init image: inpainting repaints part of an init image");
  if (n != 1 && n != devices)
    fail(n, " masks for ", devices, " devices (give 1 for every device or one per device)");
  if (req.mask_blur < 0) fail("mask blur must be 0 or more pixels, got ", req.mask_blur);
  if (req.only_masked_padding < 0) fail("the only-masked padding must be 0 or more pixels, got ", req.only_masked_padding);
  InpaintInputs in;
  in.active = true;
  in.mode = mode;
  const int k_count = std::max(n, ni);
  std::vector<Image8> inits;
  for (int k = 0; k < k_count; ++k) {
    Image8 init = init_images[ni == 1 ? 0 : k];
    in.masks.push_back(prepare_mask(req, k, originals[ni == 1 ? 0 : k], init));
    inits.push_back(std::move(init));
  }
  if (req.inpaint_only_masked) init_images = std::move(inits);
  return in;
}

void crop_control_images(std::vector<ControlNetUse>& controlnets, const InpaintInputs& inpaint, int devices) {
  for (ControlNetUse& use : controlnets) {
    const bool one = use.images.size() == 1 && inpaint.masks.size() == 1;
    std::vector<Image8> cropped;
    for (int d = 0; d < (one ? 1 : devices); ++d) {
      const Image8& image = use.images.size() == 1 ? use.images[0] : use.images.at(d);
      const CropBox& box = inpaint.mask_for(d).box;
      cropped.push_back(resize_lanczos(crop_image(image, box), image.width, image.height));
    }
    use.images = std::move(cropped);
  }
}

Tensor latent_mask(const Tensor& binary, int h, int w, Compat compat) {
  const int H = static_cast<int>(binary.dim(0)), W = static_cast<int>(binary.dim(1));
  auto source = [compat](int i, int in, int out) {
    if (compat == Compat::Flax)  // jax.image.resize "nearest": half-pixel centres
      return std::min(static_cast<int>(std::floor((i + 0.5) * in / out)), in - 1);
    const float scale = static_cast<float>(in) / static_cast<float>(out);  // torch interpolate "nearest"
    return std::min(static_cast<int>(std::floor(static_cast<float>(i) * scale)), in - 1);
  };
  Tensor out = Tensor::empty({h, w});
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) out[int64_t{y} * w + x] = binary[int64_t{source(y, H, h)} * W + source(x, W, w)];
  return out;
}

Tensor masked_images(const Tensor& images, const Tensor& binary) {
  Tensor out = Tensor::empty(images.shape());
  const int64_t plane = binary.numel();
  for (int64_t k = 0; k < images.numel(); ++k) out[k] = images[k] * (binary[k % plane] < 0.5f ? 1.0f : 0.0f);
  return out;
}

InpaintDevice start_inpaint_device(const InpaintStartInputs& in, Tensor* start) {
  InpaintDevice dev;
  dev.mode = in.mode;
  const int64_t B = in.noise.dim(0), C = in.noise.dim(1), h = in.noise.dim(2), w = in.noise.dim(3);
  dev.mask = latent_mask(in.mask->binary, static_cast<int>(h), static_cast<int>(w), in.compat);
  const bool from_image = in.strength < 1.0;  // diffusers' is_strength_max
  Tensor image_latents;
  if (from_image || in.mode == InpaintMode::LatentBlend)
    image_latents = sample_image_latents(*in.vae, in.images, in.image_eps);
  *start = from_image ? noised_start_latents(*in.scheduler, *in.state, image_latents, in.noise, in.compat)
                      : to_sampling_layout(in.noise, static_cast<float>(in.scheduler->init_noise_sigma(*in.state)));
  if (in.mode == InpaintMode::LatentBlend) {
    dev.image_latents = to_sampling_layout(image_latents, 1.0f);
    dev.noise = to_sampling_layout(in.noise, 1.0f);
    return dev;
  }
  const Tensor masked = to_sampling_layout(
      sample_image_latents(*in.vae, masked_images(in.images, in.mask->binary), in.masked_eps), 1.0f);
  const int64_t P = h * w;
  dev.extra_channels = Tensor::empty({B, h, w, 1 + C});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p) {
      float* out = dev.extra_channels.data() + (b * P + p) * (1 + C);
      out[0] = dev.mask[p];
      std::memcpy(out + 1, masked.data() + (b * P + p) * C, sizeof(float) * C);
    }
  return dev;
}

DenoiseHooks inpaint_hooks(const InpaintDevice& device, const Scheduler& scheduler, const SchedulerState& state,
                           int calls) {
  DenoiseHooks hooks;
  if (device.mode == InpaintMode::UNetChannels) {
    hooks.extra_input_channels = &device.extra_channels;
    return hooks;
  }
  hooks.after_step = [&device, &scheduler, &state, calls](int i, Tensor& x) {
    const Tensor proper = i + 1 < calls ? scheduler.add_noise(state, device.image_latents, device.noise, i + 1)
                                        : device.image_latents;
    const int64_t C = x.dim(3), P = device.mask.numel();
    for (int64_t k = 0; k < x.numel(); ++k) {
      const float m = device.mask[(k / C) % P];
      x[k] = (1.0f - m) * proper[k] + m * x[k];
    }
  };
  return hooks;
}

void paste_inpainted(Tensor& images, const PreparedMask& mask) {
  if (mask.paste_onto.rgb.empty()) return;
  const int B = static_cast<int>(images.dim(0)), H = static_cast<int>(images.dim(1)), W = static_cast<int>(images.dim(2));
  const Image8& onto = mask.paste_onto;
  const CropBox& box = mask.box;
  const bool whole = box.width() == W && box.height() == H;
  for (int b = 0; b < B; ++b) {
    float* img = images.data() + int64_t{b} * H * W * 3;
    Tensor generated = Tensor::empty({box.height(), box.width(), 3});
    if (whole) {
      std::memcpy(generated.data(), img, sizeof(float) * generated.numel());
    } else {
      const Image8 small = resize_lanczos(to_uint8(img, H, W), box.width(), box.height());
      for (int64_t k = 0; k < generated.numel(); ++k) generated[k] = static_cast<float>(small.rgb[k]) / 255.0f;
    }
    for (int y = 0; y < onto.height; ++y)
      for (int x = 0; x < onto.width; ++x) {
        const bool inside = x >= box.x1 && x < box.x2 && y >= box.y1 && y < box.y2;
        const float a = inside ? mask.paste_alpha.values[size_t(y) * W + x] / 255.0f : 0.0f;
        for (int c = 0; c < 3; ++c) {
          const int64_t k = (int64_t{y} * W + x) * 3 + c;
          const float base = onto.rgb[k] / 255.0f;
          const float gen = inside ? generated[(int64_t{y - box.y1} * box.width() + (x - box.x1)) * 3 + c] : 0.0f;
          img[k] = base * (1.0f - a) + gen * a;
        }
      }
  }
}

}  // namespace octodiff
