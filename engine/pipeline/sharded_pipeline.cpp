#include "pipeline/sharded_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>

#include "core/arena.h"
#include "core/error.h"
#include "core/memory.h"
#include "kernels/gemm.h"
#include "kernels/tensor_ops.h"

namespace octodiff {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr int kMaxImages = 64;
constexpr int kMaxSide = 4096;

}  // namespace

// ---------------------------------------------------------------------------------------------
// The compiled plan of one signature.

struct ShardedPipeline::Plan {
  Signature signature;
  std::unique_ptr<Scheduler> scheduler;
  SchedulerState initial_state;
  int calls = 0;
  double init_noise_sigma = 1;
  Numerics numerics;
  int workers = 1, threads_per_worker = 1;
  std::vector<std::unique_ptr<CachingArena>> arenas;  // one per worker
};

// Everything one device carries between the phases of a run.
struct ShardedPipeline::DeviceWork {
  Tensor context;         // (2B or B) × 77 × hidden
  Tensor initial_latents; // B × C × h × w (NCHW, as drawn)
  Tensor latents;         // B × h × w × C (NHWC, while sampling)
  Tensor images;          // B × H × W × 3
  std::vector<double> step_seconds;
};

ShardedPipeline::ShardedPipeline(std::shared_ptr<const StableDiffusionModel> model) : model_(std::move(model)) {
  if (!model_) fail("ShardedPipeline needs a model");
}

ShardedPipeline::~ShardedPipeline() = default;

std::string Signature::str() const {
  return cat("D=", devices, " B=", batch, " ", width, "x", height, " steps=", steps, " ", scheduler_name(scheduler),
             " ", timestep_spacing_name(timestep_spacing), guidance ? " cfg" : " no-cfg", " ", dtype_display_name(dtype), " ", compat_name(compat));
}

ResolvedRequest ShardedPipeline::resolve(const GenerationRequest& req) const {
  ResolvedRequest r;
  r.request = req;
  if (req.prompts.empty()) fail("at least one prompt is needed (it may be the empty string)");
  if (req.batch_per_device < 1) fail("batch per device must be at least 1, got ", req.batch_per_device);
  const int B = req.batch_per_device;
  const int P = static_cast<int>(req.prompts.size());
  int D = req.devices;
  if (D < 0) fail("the number of devices must be positive, got ", D);
  if (D == 0) {
    if (P % B) fail(P, " prompts cannot be split into batches of ", B, " per device");
    D = P / B;
  }
  if (static_cast<int64_t>(D) * B > kMaxImages)
    fail(D, " devices × ", B, " images = ", int64_t{D} * B, " images; at most ", kMaxImages, " per run");
  const int n = D * B;
  if (P == 1) {
    r.prompts.assign(n, req.prompts[0]);
  } else if (P == n) {
    r.prompts = req.prompts;
  } else {
    fail(P, " prompts do not fit ", D, " devices × ", B, " per device (give 1 prompt or ", n, ")");
  }
  const int NP = static_cast<int>(req.negative_prompts.size());
  if (NP == 0) {
    r.negative_prompts.assign(n, "");
  } else if (NP == 1) {
    r.negative_prompts.assign(n, req.negative_prompts[0]);
  } else if (NP == n) {
    r.negative_prompts = req.negative_prompts;
  } else {
    fail(NP, " negative prompts for ", n, " images (give 0, 1 or ", n, ")");
  }

  const StableDiffusionModel& m = *model_;
  const int H = req.height ? req.height : m.default_height();
  const int W = req.width ? req.width : m.default_width();
  const int mult = m.size_multiple();
  for (auto [v, name] : {std::pair{H, "height"}, {W, "width"}}) {
    if (v < 0) fail(name, " must be positive, got ", v);
    if (v % mult)
      fail(name, " ", v, " is not a multiple of ", mult, " (this model's VAE scale ", m.vae_scale_factor(),
           " × UNet down-sampling ", m.unet().config().latent_multiple(), "); try ", std::max(mult, v / mult * mult));
    if (v > kMaxSide) fail(name, " ", v, " is larger than the maximum of ", kMaxSide, " pixels");
  }
  if (req.steps < 1 || req.steps > 1000) fail("steps must be between 1 and 1000, got ", req.steps);
  if (!std::isfinite(req.guidance_scale)) fail("guidance scale must be a finite number");
  if (req.threads < 0) fail("threads must be positive, got ", req.threads);
  // The dtype is a load-time property (weights are packed in it), as with Flax's from_pretrained.
  if (req.dtype != m.dtype())
    fail("dtype ", dtype_display_name(req.dtype), " needs the model loaded for ",
         dtype_display_name(req.dtype), " (this one was loaded for ", dtype_display_name(m.dtype()),
         "): load it again with ModelLoadOptions::dtype = ", dtype_display_name(req.dtype),
         " (octodiff-cli does this from --dtype)");

  r.latent_channels = m.unet().config().in_channels;
  if (r.latent_channels != m.vae().config().latent_channels)
    fail("this model's UNet takes ", r.latent_channels, " input channels (an inpainting model?); "
         "text-to-image needs ", m.vae().config().latent_channels);
  r.latent_height = H / m.vae_scale_factor();
  r.latent_width = W / m.vae_scale_factor();
  if (req.latents) {
    const Shape expected{D, B, r.latent_channels, r.latent_height, r.latent_width};
    if (req.latents->shape() != expected)
      fail("Unexpected latents shape, got ", shape_str(req.latents->shape()), ", expected ", shape_str(expected));
    for (float v : *req.latents)
      if (!std::isfinite(v)) fail("the given latents contain NaN or infinity");
  }

  Signature& s = r.signature;
  s.devices = D;
  s.batch = B;
  s.height = H;
  s.width = W;
  s.steps = req.steps;
  s.scheduler = req.scheduler ? *req.scheduler : m.default_scheduler();
  // The model's configuration for that class (validated here, before any work) decides the
  // spacing unless the request overrides it.
  s.timestep_spacing = m.scheduler_config(s.scheduler, req.timestep_spacing).timestep_spacing;
  s.guidance = req.compat == Compat::Flax || req.guidance_scale > 1.0;
  s.dtype = req.dtype;
  s.compat = req.compat;
  return r;
}

bool ShardedPipeline::is_compiled(const Signature& s) const { return plans_.count(s.str()) != 0; }

void ShardedPipeline::clear_plans() {
  std::lock_guard<std::mutex> lock(run_mutex_);
  plans_.clear();
}

const LatentPreview& ShardedPipeline::previewer() {
  if (!previewer_) previewer_ = LatentPreview::fit(model_->vae(), model_->vae().config().scaling_factor);
  return *previewer_;
}

ShardedPipeline::Plan& ShardedPipeline::plan_for(const ResolvedRequest& r, bool* compiled, double* seconds) {
  const std::string key = r.signature.str();
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    *compiled = false;
    *seconds = 0;
    return *it->second;
  }
  const auto t0 = Clock::now();
  const Signature& s = r.signature;
  auto plan = std::make_unique<Plan>();
  plan->signature = s;
  const SchedulerSemantics semantics =
      s.compat == Compat::Flax ? SchedulerSemantics::Flax : SchedulerSemantics::Diffusers;
  plan->scheduler = Scheduler::create(s.scheduler, model_->scheduler_config(s.scheduler, s.timestep_spacing), semantics);
  plan->initial_state = plan->scheduler->set_timesteps(s.steps);
  plan->calls = plan->scheduler->num_model_calls(plan->initial_state);
  plan->init_noise_sigma = plan->scheduler->init_noise_sigma(plan->initial_state);
  plan->numerics.flavour = s.compat == Compat::Flax ? Flavour::Flax : Flavour::Diffusers;

  // Devices side by side, or one after another with all threads? Small networks leave intra-op
  // threads idle (little work per kernel), large ones parallelise well inside each kernel and
  // would multiply activation memory if run side by side.
  const int threads = r.request.threads > 0 ? r.request.threads : hardware_threads();
  const double unet_weights = static_cast<double>(model_->weights_bytes());
  const double latent_pixels = static_cast<double>(r.latent_height) * r.latent_width * s.batch;
  const bool small = unet_weights * latent_pixels < 2.0e12;  // e.g. tiny/demo models
  plan->workers = small ? std::min(s.devices, threads) : 1;
  plan->threads_per_worker = std::max(1, threads / plan->workers);
  for (int w = 0; w < plan->workers; ++w) plan->arenas.push_back(std::make_unique<CachingArena>());

  *compiled = true;
  *seconds = seconds_since(t0);
  return *(plans_[key] = std::move(plan));
}

GenerationResult ShardedPipeline::run(const GenerationRequest& request, const ProgressCallback& progress,
                                      const PreviewCallback& preview, const CancelToken* cancel) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  const auto t_start = Clock::now();
  ResolvedRequest r = resolve(request);
  const Signature& s = r.signature;
  const StableDiffusionModel& m = *model_;
  const int D = s.devices, B = s.batch, C = r.latent_channels, h = r.latent_height, w = r.latent_width;

  GenerationResult result;
  result.signature = s;
  result.prompts = r.prompts;
  result.negative_prompts = r.negative_prompts;
  if (progress) progress({Phase::Compile, 0, 0, 0, 0});
  Plan& plan = plan_for(r, &result.compiled, &result.timings.compile);
  if (r.request.preview && preview) previewer();
  result.model_calls = plan.calls;
  result.threads_per_device = plan.threads_per_worker;
  result.concurrent_devices = plan.workers;

  // Tokenize every prompt on the host (the Flax pipeline's prepare_inputs).
  const ClipTokenizer& tok = m.tokenizer();
  std::vector<std::vector<int32_t>> cond_ids(D * B), uncond_ids(D * B);
  auto encode = [&](const std::string& text, const char* what, int i) {
    try {
      return tok.encode(text);
    } catch (const Cancelled&) {
      throw;
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind("prompt: ", 0) == 0) msg = msg.substr(8);  // the tokenizer's own label
      fail(what, " ", i + 1, ": ", msg);
    }
  };
  for (int i = 0; i < D * B; ++i) {
    auto enc = encode(r.prompts[i], "prompt", i);
    if (enc.truncated)
      result.warnings.push_back(cat("prompt ", i + 1, " has ", enc.untruncated_length, " tokens; only the first ",
                                    tok.max_length(), " (", tok.max_length() - 2, " words and symbols) are used"));
    cond_ids[i] = std::move(enc.ids);
    auto neg = encode(r.negative_prompts[i], "negative prompt", i);
    if (neg.truncated && (i == 0 || r.negative_prompts[i] != r.negative_prompts[i - 1]))
      result.warnings.push_back(cat("negative prompt ", i + 1, " has ", neg.untruncated_length,
                                    " tokens and was truncated to ", tok.max_length()));
    uncond_ids[i] = std::move(neg.ids);
  }
  const int L = tok.max_length();

  // One key per device: split(PRNGKey(seed), D).
  result.device_keys = jax::split(jax::prng_key(r.request.seed), D, r.request.rng);

  // Workers: devices are dealt to plan.workers workers; each has its own threads and arena.
  CancelToken stop(cancel);  // set when the user cancels or any device fails
  std::vector<DeviceWork> work(D);
  auto on_devices = [&](const std::function<void(int)>& fn) {
    std::vector<std::exception_ptr> errors(plan.workers);
    auto worker = [&](int wi) {
      DeviceScope dscope(DeviceContext{wi, plan.threads_per_worker, &stop});
      AllocatorScope ascope(plan.arenas[wi].get());
      try {
        for (int d = wi; d < D; d += plan.workers) {
          check_cancelled();
          DeviceScope per_device(DeviceContext{d, plan.threads_per_worker, &stop});
          fn(d);
        }
      } catch (...) {
        errors[wi] = std::current_exception();
        stop.cancel();
      }
    };
    if (plan.workers == 1) {
      worker(0);
    } else {
      std::vector<std::thread> threads;
      for (int wi = 0; wi < plan.workers; ++wi) threads.emplace_back(worker, wi);
      for (auto& t : threads) t.join();
    }
    // A real error outranks the cancellations it caused in other workers.
    std::exception_ptr first_cancel;
    for (auto& e : errors) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const Cancelled&) {
        if (!first_cancel) first_cancel = e;
      } catch (...) {
        throw;
      }
    }
    if (first_cancel) std::rethrow_exception(first_cancel);
  };

  // Between phases, the component just used is dropped from memory and the arenas hand their
  // free blocks back, so that only one network's weights and activations are resident at a time
  // (weights in cache files come back from the page cache: StableDiffusionModel::release).
  auto end_phase = [&](ModelComponent done) {
    m.release(done);
    for (auto& arena : plan.arenas) arena->trim();
  };

  // Phase 1: text embeddings, [uncond; cond] per device (cond only without guidance).
  auto t0 = Clock::now();
  if (progress) progress({Phase::TextEncode, 0, 0, 0, 0});
  m.prefetch(ModelComponent::TextEncoder);
  on_devices([&](int d) {
    std::vector<int32_t> ids;
    if (s.guidance)
      for (int b = 0; b < B; ++b) ids.insert(ids.end(), uncond_ids[d * B + b].begin(), uncond_ids[d * B + b].end());
    for (int b = 0; b < B; ++b) ids.insert(ids.end(), cond_ids[d * B + b].begin(), cond_ids[d * B + b].end());
    const int rows = s.guidance ? 2 * B : B;
    work[d].context = m.text_encoder().forward(ids, rows, L).last_hidden_state;
  });
  end_phase(ModelComponent::TextEncoder);
  result.timings.text_encode = seconds_since(t0);

  // Phase 2: the denoising loop.
  t0 = Clock::now();
  m.prefetch(ModelComponent::UNet);
  const Scheduler& scheduler = *plan.scheduler;
  const float g = static_cast<float>(r.request.guidance_scale);
  on_devices([&](int d) {
    DeviceWork& dw = work[d];
    dw.initial_latents = Tensor::empty({B, C, h, w});
    if (r.request.latents) {
      const int64_t n = dw.initial_latents.numel();
      std::memcpy(dw.initial_latents.data(), r.request.latents->data() + d * n, sizeof(float) * n);
    } else {
      jax::normal_into(result.device_keys[d], dw.initial_latents.numel(), r.request.rng, dw.initial_latents.data());
    }
    Tensor x = Tensor::empty({B, h, w, C});
    kernels::nchw_to_nhwc(dw.initial_latents.data(), B, C, h, w, x.data());
    const float sigma = static_cast<float>(plan.init_noise_sigma);
    for (float& v : x) v = v * sigma;

    SchedulerState state = plan.initial_state;
    const int64_t per_batch = x.numel();
    for (int i = 0; i < plan.calls; ++i) {
      check_cancelled();
      const auto ts = Clock::now();
      const double t = scheduler.model_timestep(state, i);
      Tensor x_in = x;
      if (s.guidance) {
        x_in = Tensor::empty({2 * B, h, w, C});
        std::memcpy(x_in.data(), x.data(), sizeof(float) * per_batch);
        std::memcpy(x_in.data() + per_batch, x.data(), sizeof(float) * per_batch);
      }
      x_in = scheduler.scale_model_input(state, x_in, i);
      // bf16 weights: the first call takes its activations split in two bf16 halves (~16 bits,
      // kernels/gemm.h), at about twice a bf16 call's time. The first step jumps from the
      // largest noise level, so the schedulers carry this call's error furthest: on the tiny
      // goldens' 5-step pipeline, float32 activations for this call alone took the max image
      // error against f32 from 1.07–1.28e-2 to 5.3–7.7e-3 for every scheduler, and for all
      // the later calls only to 0.95–1.36e-2 (bf16_test.cpp prints today's figures).
      const kernels::ScopedBf16Activations activations(i == 0 ? kernels::Bf16Activations::Split
                                                              : kernels::Bf16Activations::Rounded);
      Tensor eps = m.unet().forward_nhwc(x_in, std::vector<double>(x_in.dim(0), t), dw.context, plan.numerics);
      if (s.guidance) {
        // noise = uncond + g · (text − uncond), in float32 as both pipelines compute it.
        Tensor guided = Tensor::empty({B, h, w, C});
        const float* u = eps.data();
        const float* c = eps.data() + per_batch;
        for (int64_t k = 0; k < per_batch; ++k) guided[k] = u[k] + g * (c[k] - u[k]);
        eps = guided;
      }
      StepResult next = scheduler.step(state, eps, i, x);
      x = next.prev_sample;
      state = std::move(next.state);
      dw.step_seconds.push_back(seconds_since(ts));
      if (progress) progress({Phase::Denoise, d, i + 1, plan.calls, dw.step_seconds.back()});
      if (preview && r.request.preview) preview(d, i + 1, previewer_->render(x.data(), h, w));
    }
    dw.latents = x;
  });
  end_phase(ModelComponent::UNet);
  result.timings.denoise = seconds_since(t0);

  // Phase 3: VAE decode and post-processing.
  t0 = Clock::now();
  if (progress) progress({Phase::Decode, 0, 0, 0, 0});
  m.prefetch(ModelComponent::Vae);
  const double sf = m.vae().config().scaling_factor;
  on_devices([&](int d) {
    DeviceWork& dw = work[d];
    Tensor z = Tensor::empty(dw.latents.shape());
    if (s.compat == Compat::Flax) {
      const float inv = static_cast<float>(1.0 / sf);  // Flax: (1 / sf) formed in double, f32 multiply
      for (int64_t k = 0; k < z.numel(); ++k) z[k] = dw.latents[k] * inv;
    } else {
      const float sf32 = static_cast<float>(sf);  // torch: latents / scaling_factor
      for (int64_t k = 0; k < z.numel(); ++k) z[k] = dw.latents[k] / sf32;
    }
    Tensor img = m.vae().decode_nhwc(z);
    for (float& v : img) v = std::clamp(v / 2.0f + 0.5f, 0.0f, 1.0f);
    dw.images = img;
    if (progress) progress({Phase::Decode, d, 0, 0, 0});
  });
  end_phase(ModelComponent::Vae);
  result.timings.decode = seconds_since(t0);

  // Gather (outside the arenas: results outlive the plan's memory).
  const int H = s.height, W = s.width;
  result.images = Tensor::empty({D, B, H, W, 3});
  result.initial_latents = Tensor::empty({D, B, C, h, w});
  result.final_latents = Tensor::empty({D, B, C, h, w});
  const int64_t img_n = int64_t{B} * H * W * 3, lat_n = int64_t{B} * C * h * w;
  for (int d = 0; d < D; ++d) {
    std::memcpy(result.images.data() + d * img_n, work[d].images.data(), sizeof(float) * img_n);
    std::memcpy(result.initial_latents.data() + d * lat_n, work[d].initial_latents.data(), sizeof(float) * lat_n);
    kernels::nhwc_to_nchw(work[d].latents.data(), B, h, w, C, result.final_latents.data() + d * lat_n);
  }
  std::vector<double> per_step(plan.calls, 0.0);
  double sum = 0;
  for (int d = 0; d < D; ++d)
    for (int i = 0; i < plan.calls; ++i) {
      per_step[i] += work[d].step_seconds[i] / D;
      sum += work[d].step_seconds[i];
    }
  result.timings.step = per_step;
  result.timings.mean_step = plan.calls ? sum / (D * plan.calls) : 0;
  work.clear();  // return the activations to the arenas now
  result.timings.total = seconds_since(t_start);
  result.peak_rss_bytes = peak_rss_bytes();
  if (progress) progress({Phase::Done, 0, 0, 0, 0});
  return result;
}

// ---------------------------------------------------------------------------------------------

Compat parse_compat(const std::string& name) {
  if (name == "flax") return Compat::Flax;
  if (name == "diffusers") return Compat::Diffusers;
  fail("unknown compatibility mode '", name, "' (expected 'flax' or 'diffusers')");
}

std::string compat_name(Compat c) { return c == Compat::Flax ? "flax" : "diffusers"; }

ComputeDType parse_dtype_name(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "fp32") return ComputeDType::F32;
  if (name == "bf16" || name == "bfloat16") return ComputeDType::BF16;
  fail("unknown dtype '", name, "' (expected 'f32' or 'bf16')");
}

std::string dtype_display_name(ComputeDType d) { return d == ComputeDType::F32 ? "f32" : "bf16"; }

}  // namespace octodiff
