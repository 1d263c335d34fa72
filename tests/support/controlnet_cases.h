// The two ControlNet requests every ControlNet golden was made with (tools/goldens/
// make_controlnet_goldens.py for tiny-controlnet, make_sdxl_controlnet_goldens.py for
// tiny-sdxl-controlnet; the folders have the same layout: controlnet_a/, controlnet_b/,
// control_0…2.png): "single" — controlnet_a at scale 0.8 with one control image per device;
// "multi" — controlnet_a (1.0, steps until 0.9) on control_2 (another size: resized) with
// controlnet_b (0.6, from 0.2 to 0.7) on control_0, their residuals added.
// Header-only: the pipeline tests that use it link the pipeline; the support library does not.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "io/png.h"
#include "io/safetensors.h"
#include "pipeline/controlnet.h"
#include "pipeline/generation.h"
#include "test_support.h"

namespace octodiff::test {

inline Image8 control_png(const std::filesystem::path& dir, int k) {
  return read_png(dir / ("control_" + std::to_string(k) + ".png"));
}

// Adds case "single" to req (on top of its other ControlNets, if any).
inline void add_single_controlnet(GenerationRequest& req, const std::filesystem::path& dir, ComputeDType dtype) {
  ControlNetUse a;
  a.model = load_controlnet(dir / "controlnet_a", dtype);
  a.name = "controlnet_a";
  a.scale = 0.8;
  a.images = {control_png(dir, 0), control_png(dir, 1)};  // one per device
  req.controlnets.push_back(a);
}

// Sets req's ControlNets to case "multi".
inline void set_multi_controlnet(GenerationRequest& req, const std::filesystem::path& dir, ComputeDType dtype) {
  ControlNetUse a, b;
  a.model = load_controlnet(dir / "controlnet_a", dtype);
  a.scale = 1.0;
  a.guidance_end = 0.9;
  a.images = {control_png(dir, 2)};  // not the image size: resized to it
  b.model = load_controlnet(dir / "controlnet_b", dtype);
  b.scale = 0.6;
  b.guidance_start = 0.2;
  b.guidance_end = 0.7;
  b.images = {control_png(dir, 0)};
  req.controlnets = {a, b};
}

// The case named "single" or "multi" on req.
inline void add_controlnet_case(GenerationRequest& req, const std::string& name, const std::filesystem::path& dir,
                                 ComputeDType dtype) {
  if (name == "single")
    add_single_controlnet(req, dir, dtype);
  else
    set_multi_controlnet(req, dir, dtype);
}

// A run of case `name` against the goldens' <name>.latents_final and <name>.images: `calls` model
// calls, the final latents (as `latents_shape`) and the images (as `images_shape`) at the parity bar.
// `label` ("controlnet pipeline", ...) begins the messages.
inline void expect_case_parity(const std::string& label, const std::string& name, const GenerationResult& res,
                               const SafetensorsFile& goldens, int calls, const Shape& latents_shape,
                               const Shape& images_shape) {
  EXPECT_EQ(res.model_calls, calls);
  expect_parity(label + " " + name + " final latents", res.final_latents.reshaped(latents_shape),
                goldens.to_f32(name + ".latents_final"));
  expect_parity(label + " " + name + " images", res.images.reshaped(images_shape), goldens.to_f32(name + ".images"));
}

// Case `name` in bf16 gives images within 1e-2 of its f32 run (run_case(name, dtype) runs it).
inline void expect_bf16_images_close_to_f32(
    const std::string& label, const std::string& name,
    const std::function<GenerationResult(const std::string&, ComputeDType)>& run_case) {
  const GenerationResult f32 = run_case(name, ComputeDType::F32);
  const GenerationResult bf16 = run_case(name, ComputeDType::BF16);
  expect_close_abs(label + " " + name + " bf16 vs f32 images", bf16.images, f32.images, 1e-2);
}

}  // namespace octodiff::test
