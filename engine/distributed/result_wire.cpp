#include "distributed/result_wire.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace octodiff {
using nlohmann::json;

// The wire form of Signature and Timings: one JSON key a field, enums as their numbers. Timings
// travels without safety_check (a received result reports 0 there).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Signature, devices, batch, height, width, steps, scheduler, timestep_spacing,
                                   guidance, embedded_guidance, dtype, compat, decoder, strength, inpaint)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Timings, compile, text_encode, denoise, mean_step, encode_image, step, decode,
                                   total)

namespace {

void check_shape(const Tensor& t, const json& expected, const char* what) {
  if (t.shape() != expected.get<Shape>())
    fail("a result's ", what, " has shape ", shape_str(t.shape()), ", its header says ",
         shape_str(expected.get<Shape>()));
}

}  // namespace

std::string result_header_json(const GenerationResult& r) {
  json keys = json::array();
  for (const jax::Key& k : r.device_keys) keys.push_back({k.k0, k.k1});
  json embeddings = json::array();
  for (const auto& e : r.embeddings) embeddings.push_back({e.name, e.path});
  json j = {{"signature", json(r.signature)}, {"compiled", r.compiled},
            {"shapes", {{"images", r.images.shape()}, {"initial_latents", r.initial_latents.shape()},
                        {"final_latents", r.final_latents.shape()}}},
            {"device_keys", keys}, {"prompts", r.prompts}, {"negative_prompts", r.negative_prompts},
            {"warnings", r.warnings}, {"context_tokens", r.context_tokens}, {"nsfw_flagged", r.nsfw_flagged},
            {"vae_tiles", r.vae_tiles ? json::array({r.vae_tiles->tile, r.vae_tiles->overlap}) : json()}, {"embeddings", embeddings},
            {"model_calls", r.model_calls}, {"threads_per_device", r.threads_per_device},
            {"concurrent_devices", r.concurrent_devices}, {"timings", json(r.timings)},
            {"peak_rss_bytes", r.peak_rss_bytes}};
  return j.dump();
}

ResultShapes result_header_shapes(const std::string& header_json) {
  const json j = json::parse(header_json);
  const json& s = j.at("shapes");
  return {s.at("images").get<Shape>(), s.at("initial_latents").get<Shape>(), s.at("final_latents").get<Shape>()};
}

GenerationResult result_from_header(const std::string& header_json, Tensor images, Tensor initial_latents,
                                    Tensor final_latents) {
  const json j = json::parse(header_json);
  check_shape(images, j.at("shapes").at("images"), "images");
  check_shape(initial_latents, j.at("shapes").at("initial_latents"), "initial latents");
  check_shape(final_latents, j.at("shapes").at("final_latents"), "final latents");
  GenerationResult r;
  r.signature = j.at("signature").get<Signature>();
  r.compiled = j.at("compiled");
  r.images = std::move(images);
  r.initial_latents = std::move(initial_latents);
  r.final_latents = std::move(final_latents);
  for (const json& k : j.at("device_keys")) r.device_keys.push_back({k.at(0).get<uint32_t>(), k.at(1).get<uint32_t>()});
  r.prompts = j.at("prompts").get<std::vector<std::string>>();
  r.negative_prompts = j.at("negative_prompts").get<std::vector<std::string>>();
  r.warnings = j.at("warnings").get<std::vector<std::string>>();
  r.context_tokens = j.at("context_tokens").get<std::vector<int>>();
  r.nsfw_flagged = j.at("nsfw_flagged").get<std::vector<bool>>();
  if (const auto& t = j.at("vae_tiles"); !t.is_null())
    r.vae_tiles = VaeTiling{VaeTilingMode::On, t.at(0).get<int>(), t.at(1).get<int>()};
  for (const json& e : j.at("embeddings")) r.embeddings.push_back({e.at(0).get<std::string>(), e.at(1).get<std::string>()});
  r.model_calls = j.at("model_calls");
  r.threads_per_device = j.at("threads_per_device");
  r.concurrent_devices = j.at("concurrent_devices");
  r.timings = j.at("timings").get<Timings>();
  r.peak_rss_bytes = j.at("peak_rss_bytes");
  return r;
}

}  // namespace octodiff
