// Schedulers: PNDM, DDIM, LMS, DPM-Solver++, Euler, Euler ancestral and LCM as pure step
// functions over explicit state.
//
// As in diffusers, a scheduler object holds only configuration and tables; everything that
// changes during sampling lives in a SchedulerState value. `step` takes the state and returns
// the next one — it never mutates its inputs — so a pipeline can keep one state per device and
// a test can replay any step.
//
// Two semantics exist (see spec/schedulers.md):
//   Flax      — diffusers' Flax schedulers as FlaxStableDiffusionPipeline drives them: PNDM runs
//               N model calls and stops at t=1, timesteps are truncated to int32 before the
//               UNet/scale_model_input/step, DPM-Solver steps to training timestep 0.
//   Diffusers — the PyTorch schedulers of diffusers 0.31 as StableDiffusionPipeline drives them
//               (PNDM runs N+1 calls, float timesteps for LMS/Euler, DPM-Solver ends at sigma 0);
//               this is what the goldens were computed with.
//   There is no Flax LCMScheduler and no Flax EulerAncestralDiscreteScheduler in diffusers 0.31:
//   under Flax semantics both run the torch algorithm (see lcm_scheduler.cpp and
//   euler_ancestral_scheduler.cpp for what differs).
//
// Stochastic steps (LCM, Euler ancestral, DPM++ 2M SDE) add fresh Gaussian noise. The scheduler never draws
// it: the caller asks needs_noise(state, i) and passes the noise to the five-argument step().
// The pipeline's rule (one place for it): the noise of model call i on device d is
//   jax::normal(jax::fold_in(key_d, i), B·C·h·w, request.rng)
// read as a (B, C, h, w) NCHW tensor, then converted to the sample's layout (NHWC while
// sampling: kernels::nchw_to_nhwc), where key_d is device d's key (GenerationResult::
// device_keys[d], the key its initial latents were drawn from). Calls that need no noise draw
// nothing. diffusers draws with torch's generator instead, so a stochastic run reproduces
// diffusers only when the same noise is injected (the tests do that).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace octodiff {

// New kinds go at the end: the GUI stores a kind's number in its settings.
// DpmSolverSde: DPMSolverMultistepScheduler with algorithm_type "sde-dpmsolver++" (A1111's
// "DPM++ 2M SDE"), stochastic like Euler ancestral.
enum class SchedulerKind { Pndm, Ddim, Lms, DpmSolverPP, Euler, EulerAncestral, Lcm, DpmSolverSde };
enum class SchedulerSemantics { Flax, Diffusers };
enum class PredictionType { Epsilon, VPrediction, Sample };
enum class TimestepSpacing { Leading, Linspace, Trailing };

// Every kind, in enum order.
const std::vector<SchedulerKind>& all_scheduler_kinds();
// "pndm", "ddim", "lms", "dpm++" (also "dpmpp2m", "dpm"), "euler", "euler-a" (also "euler_a",
// "euler-ancestral"), "lcm", "dpm++-sde" (also "dpmpp2m-sde", "dpm++-2m-sde"); case-insensitive;
// throws octodiff::Error listing the valid names.
SchedulerKind parse_scheduler_kind(const std::string& name);
std::string scheduler_name(SchedulerKind kind);        // canonical CLI name ("dpm++", ...)
std::string scheduler_class_name(SchedulerKind kind);  // diffusers class, e.g. "PNDMScheduler"
// The kind whose diffusers class is `class_name` ("EulerDiscreteScheduler" -> Euler,
// "DPMSolverMultistepScheduler" -> DpmSolverPP); nullopt for any other class.
std::optional<SchedulerKind> scheduler_kind_from_class_name(const std::string& class_name);
// The kind a scheduler_config.json text names: its class, and for DPMSolverMultistepScheduler its
// algorithm_type ("sde-dpmsolver++" -> DpmSolverSde); nullopt without "_class_name" or for a class
// no kind implements. Throws octodiff::Error as scheduler_config_class_name.
std::optional<SchedulerKind> scheduler_config_kind(const std::string& json_text);
// The "_class_name" of a scheduler_config.json text; nullopt when the key is absent. Throws
// octodiff::Error for text that is not a JSON object or a "_class_name" that is not a string.
std::optional<std::string> scheduler_config_class_name(const std::string& json_text);

// LMS, Euler and DPM-Solver (either algorithm): the kinds with Karras sigmas
// (SchedulerConfig::use_karras_sigmas).
bool supports_karras_sigmas(SchedulerKind kind);
// DDIM, Euler, Euler ancestral, DPM-Solver (either algorithm) and LCM: the kinds whose diffusers
// classes have rescale_betas_zero_snr (PNDM and LMS have none and ignore the key).
bool supports_zero_snr(SchedulerKind kind);

// "leading", "linspace", "trailing" (diffusers' timestep_spacing values); throws octodiff::Error
// naming the valid values otherwise.
TimestepSpacing parse_timestep_spacing(const std::string& name);
std::string timestep_spacing_name(TimestepSpacing spacing);

// Configuration as diffusers' `Cls.from_config(scheduler_config.json)` builds it: keys present
// in the file override the defaults of the class `kind` (not of the class the file names), and
// unknown keys are ignored.
struct SchedulerConfig {
  int num_train_timesteps = 1000;
  double beta_start = 0.0001;
  double beta_end = 0.02;
  std::string beta_schedule = "linear";  // linear | scaled_linear | squaredcos_cap_v2
  std::vector<double> trained_betas;     // overrides beta_schedule when non-empty
  bool set_alpha_to_one = true;
  bool skip_prk_steps = false;
  int steps_offset = 0;
  bool clip_sample = true;
  double clip_sample_range = 1.0;
  PredictionType prediction_type = PredictionType::Epsilon;
  TimestepSpacing timestep_spacing = TimestepSpacing::Leading;
  int solver_order = 2;                        // DPM-Solver
  bool lower_order_final = true;               // DPM-Solver
  std::string algorithm_type = "dpmsolver++";  // dpmsolver++ | dpmsolver (DpmSolverSde: sde-dpmsolver++)
  std::string solver_type = "midpoint";        // midpoint | heun
  // DPM-Solver/Euler under Diffusers semantics: the sigma the last step lands on ("zero" |
  // "sigma_min"). The Flax classes have no such option (DPM-Solver steps to training t = 0).
  std::string final_sigmas_type = "zero";
  // LMS, Euler, DPM-Solver: diffusers' use_karras_sigmas (A1111's "Karras" samplers): the sigmas
  // follow Karras et al.'s schedule (ρ = 7) from the largest to the smallest sigma of the usual
  // grid (DPM-Solver: of the training table), and the timesteps are read back from them. The Flax
  // classes have no such option: a scheduler with it runs the torch algorithm under either
  // semantics (Scheduler::create; semantics() then reports Diffusers).
  bool use_karras_sigmas = false;
  // Euler with Karras sigmas: its own σ bounds instead of the grid's (null in the file: the grid's).
  std::optional<double> sigma_min, sigma_max;
  // diffusers' rescale_betas_zero_snr ("Common Diffusion Noise Schedules and Sample Steps are
  // Flawed", Algorithm 1; A1111's "Noise Schedule: Zero Terminal SNR"): the betas are rescaled so
  // that ᾱ of the last training timestep is 0 — pure noise, for models trained that way (with
  // v_prediction and trailing spacing). The sigma classes (Euler, Euler ancestral, DPM-Solver)
  // then set that ᾱ to 2⁻²⁴, a finite σ ≈ 4096, as diffusers does. No Flax class has it: a
  // scheduler with it runs the torch algorithm under either semantics (Scheduler::create).
  bool rescale_betas_zero_snr = false;
  int original_inference_steps = 50;  // LCM: the distillation schedule's step count
  double timestep_scaling = 10.0;     // LCM: t·timestep_scaling in the boundary conditions

  // Throws octodiff::Error naming the first value the class `kind` cannot use.
  void validate(SchedulerKind kind) const;

  static SchedulerConfig defaults(SchedulerKind kind);
  // Parses scheduler_config.json text; throws octodiff::Error for malformed JSON or values, and
  // for options this port does not implement set to a non-default value (use_exponential_sigmas,
  // thresholding, ...), naming the key.
  static SchedulerConfig from_json(const std::string& json_text, SchedulerKind kind);
};

struct SchedulerState {
  std::vector<double> timesteps;  // the grid as the scheduler stores it (may be fractional)
  std::vector<double> sigmas;     // LMS/Euler/DPM (diffusers): per-step sigmas, last = final
  int num_inference_steps = 0;
  int step_index = 0;  // number of completed step() calls
  // Multistep history (PNDM ets, LMS derivatives, DPM model outputs), newest last.
  std::vector<Tensor> history;
  std::vector<double> history_t;  // the timestep/sigma each history entry belongs to
  Tensor cur_sample;              // PNDM: the sample the current interval started from
  Tensor accumulator;             // PNDM Runge-Kutta: weighted sum of the slopes so far
  int lower_order_nums = 0;       // DPM-Solver
  // The call an image-to-image run begins at (diffusers' set_begin_index): steps run from it, and
  // multistep counters (PNDM's) count from it.
  int begin_index = 0;
};

struct StepResult {
  Tensor prev_sample;
  Tensor pred_original_sample;  // x0 estimate (undefined for schedulers that do not form one)
  SchedulerState state;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  static std::unique_ptr<Scheduler> create(SchedulerKind kind, const SchedulerConfig& config,
                                           SchedulerSemantics semantics);

  virtual SchedulerKind kind() const = 0;
  SchedulerSemantics semantics() const { return semantics_; }
  const SchedulerConfig& config() const { return config_; }
  const std::vector<float>& alphas_cumprod() const { return alphas_cumprod_; }

  // State for N inference steps (throws octodiff::Error for N < 1 or N > num_train_timesteps).
  virtual SchedulerState set_timesteps(int num_inference_steps) const = 0;

  // Image-to-image: the state for N steps at `strength` (0 < strength <= 1), ready to run from
  // call t_start = N − min(int(N·strength), N) (diffusers' get_timesteps, the Flax pipeline's
  // get_timestep_start; PNDM's order is 1 in both): step_index = begin_index = t_start, so the
  // run makes num_model_calls − t_start calls, i = t_start, t_start + 1, … LCM instead
  // overrides it as LCMScheduler.set_timesteps(N, strength=…) does: N steps over the first
  // int(original_inference_steps·strength) distillation timesteps, begun at call 0.
  // Throws octodiff::Error for a strength outside (0, 1] (and for LCM when fewer timesteps remain than N).
  virtual SchedulerState set_timesteps_for_strength(int num_inference_steps, double strength) const;

  // The noisy sample diffusers' add_noise makes from clean samples at the noise level of call i
  // (the call a run begins at): scale_x·original + scale_noise·noise elementwise in float32, with
  //   PNDM, DDIM, LCM, DPM-Solver (Flax): √ᾱ_t, √(1 − ᾱ_t), t = model_timestep(state, i)
  //   LMS, Euler, Euler ancestral:          1, σ = sigmas[i] (torch: sigmas[begin_index])
  //   DPM-Solver (Diffusers):               α = 1/√(σ²+1), σ·α, σ = sigmas[i]
  // `original` and `noise` share a shape (any layout).
  Tensor add_noise(const SchedulerState& state, const Tensor& original, const Tensor& noise, int i) const;

  // The factor the pipeline multiplies the initial noise by.
  virtual double init_noise_sigma(const SchedulerState& state) const = 0;

  // Number of model (UNet) calls the pipeline makes for this state: one per timestep, except
  // PNDM (Flax: N; torch: N+1).
  virtual int num_model_calls(const SchedulerState& state) const;

  // The timestep passed to the UNet for call i (already truncated to an integer under Flax).
  virtual double model_timestep(const SchedulerState& state, int i) const = 0;

  // Scales the model input for call i (identity for PNDM/DDIM/DPM; 1/sqrt(σ²+1) for LMS/Euler).
  virtual Tensor scale_model_input(const SchedulerState& state, const Tensor& sample, int i) const = 0;

  // One denoising step for call i: pure function of (state, model output, timestep, sample).
  // Throws octodiff::Error when needs_noise(state, i): such a step needs the overload below.
  virtual StepResult step(const SchedulerState& state, const Tensor& model_output, int i,
                          const Tensor& sample) const = 0;

  // True when step i adds fresh noise (LCM: every step but the last; Euler ancestral: every step
  // whose sigma_up is not 0, i.e. all but the last). Deterministic schedulers: always false.
  virtual bool needs_noise(const SchedulerState& state, int i) const;

  // The step for any scheduler, stochastic or not. `noise`: standard normal values with the
  // shape and memory layout of `sample` (see the rule at the top of this file); required when
  // needs_noise(state, i), otherwise ignored (an undefined Tensor() may be passed). Pure, like
  // the four-argument step, which it equals when no noise is needed.
  StepResult step(const SchedulerState& state, const Tensor& model_output, int i, const Tensor& sample,
                  const Tensor& noise) const;

 protected:
  // What ᾱ of the last training timestep becomes when rescale_betas_zero_snr makes it 0: kept
  // (DDIM, LCM, which never divide by it with v_prediction) or 2⁻²⁴ (the classes that build a
  // sigma table from ᾱ: Euler, Euler ancestral, DPM-Solver; LMS has no zero SNR).
  enum class TerminalAlpha { AsComputed, SigmaFloor };
  Scheduler(const SchedulerConfig& config, SchedulerSemantics semantics,
            TerminalAlpha terminal = TerminalAlpha::AsComputed);
  // Step i with its noise (already checked: defined, shaped like `sample`). Only called when
  // needs_noise(state, i); stochastic schedulers override it.
  virtual StepResult step_with_noise(const SchedulerState& state, const Tensor& model_output, int i,
                                     const Tensor& sample, const Tensor& noise) const;
  // add_noise's two factors for call i; the default is the DDPM one (√ᾱ_t, √(1 − ᾱ_t)).
  struct NoiseScales {
    float sample = 1, noise = 0;
  };
  virtual NoiseScales add_noise_scales(const SchedulerState& state, int i) const;
  SchedulerConfig config_;
  SchedulerSemantics semantics_;
  std::vector<float> betas_, alphas_cumprod_;  // f32 tables, as diffusers keeps them
};

}  // namespace octodiff
