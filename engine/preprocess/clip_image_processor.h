// CLIPImageProcessor (transformers 4.4x) as the SD safety checker's feature_extractor runs it on
// the pipeline's uint8 images (numpy_to_pil, then `feature_extractor(pil_images,
// return_tensors="np").pixel_values`, spec/pipeline.md §7):
//
//   1. resize so the shortest side is `shortest_edge` (the long side int(shortest_edge · long /
//      short), truncated) with PIL's 8-bit bicubic resampling (Image.BICUBIC, resample=3:
//      io/image.h resize_bicubic, PIL's libImaging/Resample.c: Keys' cubic a = −0.5 widened by
//      the scale when shrinking, 22-bit fixed-point taps, horizontal pass first, each pass rounded
//      to 8 bits);
//   2. center crop crop_height × crop_width at top = (h − ch) // 2, left = (w − cw) // 2;
//   3. rescale: float64(x) · rescale_factor, then float32;
//   4. normalize: (x − mean) / std in float32 (CLIP's mean/std by default).
// Only the SD checker's path is implemented: RGB in, bicubic resampling, a crop that fits.
// Output NHWC (what the models run on), where transformers gives NCHW.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"

namespace octodiff {

struct ClipImageProcessor {
  bool do_resize = true;
  int shortest_edge = 224;
  bool do_center_crop = true;
  int crop_height = 224, crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<float, 3> image_mean{0.48145466f, 0.4578275f, 0.40821073f};  // OPENAI_CLIP_MEAN
  std::array<float, 3> image_std{0.26862954f, 0.26130258f, 0.27577711f};  // OPENAI_CLIP_STD

  // A preprocessor_config.json text ("size": N or {"shortest_edge": N}, "crop_size": N or
  // {"height", "width"}, "resample": 3, "do_*", "rescale_factor", "image_mean", "image_std").
  // Anything outside the path above (another resampling filter, size as height/width) is refused
  // naming `what`.
  static ClipImageProcessor from_json(const std::string& text, const std::string& what);

  // Steps 1–2 on one image (uint8 still, as transformers has it before rescaling).
  Image8 resize_and_crop(const Image8& image) const;
  // All four steps: N × crop_height × crop_width × 3 float32.
  Tensor operator()(const std::vector<Image8>& images) const;
};

}  // namespace octodiff
