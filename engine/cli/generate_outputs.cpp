#include "generate_outputs.h"

#include "io/npy.h"
#include "pipeline/export.h"

namespace octodiff::cli {

nlohmann::json write_generate_outputs(const Args& args, const std::string& out, const GenerationRequest& req,
                                      const GenerationResult& result, const StableDiffusionModel& model, int scale,
                                      FILE* info) {
  save_grid_png(out, req, result, model, scale);
  std::fprintf(info, "wrote %s\n", out.c_str());
  nlohmann::json outputs = {{"grid", out}};
  if (auto dir = args.get("out-dir")) {
    auto paths = save_image_pngs(*dir, req, result, model, "octodiff", scale);
    std::fprintf(info, "wrote %zu images to %s\n", paths.size(), dir->c_str());
    nlohmann::json list = nlohmann::json::array();
    for (const auto& p : paths) list.push_back(p.string());
    outputs["images"] = list;
  }
  if (auto p = args.get("save-latents")) {
    write_npy(*p, result.initial_latents);
    std::fprintf(info, "wrote initial latents %s to %s\n", shape_str(result.initial_latents.shape()).c_str(), p->c_str());
    outputs["latents"] = *p;
  }
  if (auto p = args.get("save-array")) {
    write_npy(*p, result.images);
    std::fprintf(info, "wrote images %s to %s\n", shape_str(result.images.shape()).c_str(), p->c_str());
    outputs["array"] = *p;
  }
  return outputs;
}

nlohmann::json generate_json(const GenerationRequest& req, const GenerationResult& result,
                             const StableDiffusionModel& model, bool models_own_scheduler, double load_seconds,
                             const nlohmann::json& runs, const nlohmann::json& outputs) {
  const Signature& s = result.signature;
  nlohmann::json keys = nlohmann::json::array();
  for (const auto& k : result.device_keys) keys.push_back({k.k0, k.k1});
  nlohmann::json controlnets = nlohmann::json::array();
  for (const ControlNetUse& c : req.controlnets)
    controlnets.push_back({{"name", c.name}, {"module", c.preprocessor}, {"scale", c.scale},
                           {"guidance_start", c.guidance_start}, {"guidance_end", c.guidance_end}});
  return {{"settings",
           {{"model", model.path().string()},
            {"model_hash", model.model_hash()},
            {"prompts", result.prompts},
            {"negative_prompts", result.negative_prompts},
            {"seed", req.seed},
            {"steps", s.steps},
            {"guidance_scale", req.guidance_scale},
            {"scheduler", scheduler_name(s.scheduler)},
            {"scheduler_class", scheduler_class_name(s.scheduler)},
            {"scheduler_is_models_own", models_own_scheduler},
            {"timestep_spacing", timestep_spacing_name(s.timestep_spacing)},
            {"karras_sigmas", s.karras_sigmas},
            {"zero_snr", s.zero_snr},
            {"guidance_rescale", req.guidance_rescale},
            {"height", s.height},
            {"width", s.width},
            {"devices", s.devices},
            {"batch_per_device", s.batch},
            {"compat", compat_name(s.compat)},
            {"rng", jax::rng_scheme_name(req.rng)},
            {"dtype", dtype_display_name(s.dtype)},
            {"decoder", decoder_name(s.decoder)},
            {"vae_tiling", vae_tiling_mode_name(req.vae_tiling.mode)},
            {"vae_tiled", result.vae_tiles.has_value()},
            {"prompt_syntax", prompt_syntax_name(req.prompt_syntax)},
            {"long_prompts", long_prompts_name(req.long_prompts)},
            {"clip_skip", req.clip_skip},
            {"context_tokens", result.context_tokens},
            {"device_keys", keys},
            {"controlnets", controlnets}}},
          {"nsfw_flagged", result.nsfw_flagged},
          {"load_seconds", load_seconds},
          {"runs", runs},
          {"warnings", result.warnings},
          {"outputs", outputs}};
}

}  // namespace octodiff::cli
