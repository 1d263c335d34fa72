// The seven schedulers behind Scheduler::create (three of them the sigma family below). Each file <name>_scheduler.cpp implements one and
// documents how its Flax and Diffusers semantics differ.
#pragma once

#include <vector>

#include "schedulers/scheduler.h"

namespace octodiff {

// The schedulers that feed the UNet the sample itself (PNDM, DDIM, LCM, DPM-Solver): the initial
// noise is not scaled (init_noise_sigma 1), the model timestep of call i is the grid's entry i and
// scale_model_input is the identity. `name` ("PNDM", ...) begins their error messages.
class UnscaledInputScheduler : public Scheduler {
 public:
  double init_noise_sigma(const SchedulerState& state) const override;
  double model_timestep(const SchedulerState& state, int i) const override;
  Tensor scale_model_input(const SchedulerState& state, const Tensor& sample, int i) const override;

 protected:
  UnscaledInputScheduler(const SchedulerConfig& config, SchedulerSemantics semantics, const char* name,
                         TerminalAlpha terminal = TerminalAlpha::AsComputed);
  // ᾱ at training timestep t, or below t = 0 the final ᾱ: 1 with set_alpha_to_one, else ᾱ_0
  // (the previous noise level of a PNDM, DDIM or LCM step).
  float alpha_or_final(int t) const;
  // Throws octodiff::Error when an epsilon-predicting model's step at timestep t would divide by
  // √ᾱ_t = 0 (rescale_betas_zero_snr's last training timestep; diffusers returns NaN images there).
  void check_signal_left(int t) const;
  const char* name_;
};

// PNDM (pseudo linear multistep); with skip_prk_steps it is PLMS, the SD default.
class PndmScheduler final : public UnscaledInputScheduler {
 public:
  PndmScheduler(const SchedulerConfig& config, SchedulerSemantics semantics);
  SchedulerKind kind() const override { return SchedulerKind::Pndm; }
  using Scheduler::step;  // the five-argument step of the base class
  SchedulerState set_timesteps(int num_inference_steps) const override;
  int num_model_calls(const SchedulerState& state) const override;
  StepResult step(const SchedulerState& state, const Tensor& model_output, int i,
                  const Tensor& sample) const override;

 private:
  StepResult step_prk(const SchedulerState& state, const Tensor& e, int t, const Tensor& x) const;
  StepResult step_plms(const SchedulerState& state, const Tensor& e, int t, const Tensor& x) const;
  // PNDM paper eq. (9): x_{t_prev} from x_t and the effective noise slope e.
  Tensor transfer(const Tensor& x, int t, int t_prev, const Tensor& e) const;
  int num_prk_timesteps() const { return config_.skip_prk_steps ? 0 : 12; }
};

// DDIM with eta = 0 (deterministic).
class DdimScheduler final : public UnscaledInputScheduler {
 public:
  DdimScheduler(const SchedulerConfig& config, SchedulerSemantics semantics);
  SchedulerKind kind() const override { return SchedulerKind::Ddim; }
  using Scheduler::step;  // the five-argument step of the base class
  SchedulerState set_timesteps(int num_inference_steps) const override;
  StepResult step(const SchedulerState& state, const Tensor& model_output, int i,
                  const Tensor& sample) const override;
};

// The sigma-space family (LMS, Euler, Euler ancestral): training sigmas σ_t = √((1 − ᾱ_t)/ᾱ_t),
// the model input scaled by 1/√(σ² + 1), add_noise as x + σ·n, the initial noise scaled by
// σ_max (√(σ_max² + 1) with leading spacing). Each subclass says how it builds its grid and steps.
class SigmaScheduler : public Scheduler {
 public:
  double init_noise_sigma(const SchedulerState& state) const override;
  double model_timestep(const SchedulerState& state, int i) const override;
  Tensor scale_model_input(const SchedulerState& state, const Tensor& sample, int i) const override;

 protected:
  SigmaScheduler(const SchedulerConfig& config, SchedulerSemantics semantics);
  NoiseScales add_noise_scales(const SchedulerState& state, int i) const override;
  // The entry of state.sigmas that call i uses: i itself (Flax Euler looks its timestep up).
  virtual int sigma_index(const SchedulerState& state, int i) const;
  // init_noise_sigma under Flax semantics, which the pipeline reads before set_timesteps: from
  // the training sigmas (the default: as the Diffusers rule, applied to the largest of them).
  virtual double flax_init_noise_sigma() const;
  std::vector<float> train_sigmas_;
};

// K-LMS: 4th-order linear multistep in sigma space.
class LmsDiscreteScheduler final : public SigmaScheduler {
 public:
  LmsDiscreteScheduler(const SchedulerConfig& config, SchedulerSemantics semantics);
  SchedulerKind kind() const override { return SchedulerKind::Lms; }
  using Scheduler::step;  // the five-argument step of the base class
  SchedulerState set_timesteps(int num_inference_steps) const override;
  StepResult step(const SchedulerState& state, const Tensor& model_output, int i,
                  const Tensor& sample) const override;

 protected:
  double flax_init_noise_sigma() const override;  // the largest training sigma itself
};

// Euler (k-diffusion "euler", no churn).
class EulerDiscreteScheduler final : public SigmaScheduler {
 public:
  EulerDiscreteScheduler(const SchedulerConfig& config, SchedulerSemantics semantics);
  SchedulerKind kind() const override { return SchedulerKind::Euler; }
  using Scheduler::step;  // the five-argument step of the base class
  SchedulerState set_timesteps(int num_inference_steps) const override;
  double model_timestep(const SchedulerState& state, int i) const override;
  StepResult step(const SchedulerState& state, const Tensor& model_output, int i,
                  const Tensor& sample) const override;

 protected:
  // Flax looks the truncated timestep up in the grid and falls back to 0 when it is not there.
  int sigma_index(const SchedulerState& state, int i) const override;
};

// Euler ancestral: Euler to sigma_down plus fresh noise of sigma_up (stochastic).
class EulerAncestralDiscreteScheduler final : public SigmaScheduler {
 public:
  EulerAncestralDiscreteScheduler(const SchedulerConfig& config, SchedulerSemantics semantics);
  SchedulerKind kind() const override { return SchedulerKind::EulerAncestral; }
  using Scheduler::step;  // the five-argument step of the base class
  SchedulerState set_timesteps(int num_inference_steps) const override;
  StepResult step(const SchedulerState& state, const Tensor& model_output, int i,
                  const Tensor& sample) const override;
  bool needs_noise(const SchedulerState& state, int i) const override;

 protected:
  StepResult step_with_noise(const SchedulerState& state, const Tensor& model_output, int i, const Tensor& sample,
                             const Tensor& noise) const override;
};

// LCM: consistency-model multistep sampling (stochastic: noise on every step but the last).
class LcmScheduler final : public UnscaledInputScheduler {
 public:
  LcmScheduler(const SchedulerConfig& config, SchedulerSemantics semantics);
  SchedulerKind kind() const override { return SchedulerKind::Lcm; }
  using Scheduler::step;  // the five-argument step of the base class
  SchedulerState set_timesteps(int num_inference_steps) const override;
  StepResult step(const SchedulerState& state, const Tensor& model_output, int i,
                  const Tensor& sample) const override;
  SchedulerState set_timesteps_for_strength(int num_inference_steps, double strength) const override;
  bool needs_noise(const SchedulerState& state, int i) const override;

 protected:
  StepResult step_with_noise(const SchedulerState& state, const Tensor& model_output, int i, const Tensor& sample,
                             const Tensor& noise) const override;

 private:
  // N steps over the first int(original_inference_steps·strength) distillation timesteps.
  SchedulerState lcm_timesteps(int n, double strength) const;
  // x0 from the model output at ᾱ_t = alpha (epsilon/sample/v), clipped when clip_sample.
  Tensor predict_x0(const Tensor& model_output, const Tensor& sample, float alpha) const;
};

// DPM-Solver / DPM-Solver++ multistep (orders 1-3), the "DPM++ 2M" of UIs with the defaults.
class DpmSolverMultistepScheduler final : public UnscaledInputScheduler {
 public:
  DpmSolverMultistepScheduler(const SchedulerConfig& config, SchedulerSemantics semantics);
  SchedulerKind kind() const override {
    return sde() ? SchedulerKind::DpmSolverSde : SchedulerKind::DpmSolverPP;
  }
  using Scheduler::step;  // the five-argument step of the base class
  SchedulerState set_timesteps(int num_inference_steps) const override;
  StepResult step(const SchedulerState& state, const Tensor& model_output, int i,
                  const Tensor& sample) const override;
  // sde-dpmsolver++: every step whose target sigma is not 0 (the final step to sigma 0 multiplies
  // diffusers' draw by 0).
  bool needs_noise(const SchedulerState& state, int i) const override;

 protected:
  NoiseScales add_noise_scales(const SchedulerState& state, int i) const override;
  StepResult step_with_noise(const SchedulerState& state, const Tensor& model_output, int i,
                             const Tensor& sample, const Tensor& noise) const override;

 private:
  // Noise level of one point of the trajectory: alpha, sigma and lambda = log(alpha/sigma).
  struct Level {
    float alpha, sigma, lambda;
  };
  Level level_of_sigma(float sigma) const;  // Diffusers: from the step's sigma (sigma space)
  Level level_of_timestep(int t) const;     // Flax: from the training tables
  Tensor convert_model_output(const Tensor& m, const Tensor& x, const Level& s) const;
  Tensor update(const std::vector<Tensor>& outputs, const std::vector<Level>& levels, const Level& target,
                int order, const Tensor& x) const;
  // (1/r)·(newer − older), r = (λ_newer − λ_older)/h: the first divided difference D1 of the updates.
  static Tensor divided_difference(const Tensor& newer, const Tensor& older, const Level& l_newer,
                                   const Level& l_older, float h, float* r);
  Tensor sde_update(const std::vector<Tensor>& outputs, const std::vector<Level>& levels, const Level& target,
                    int order, const Tensor& x, const Tensor& noise) const;
  bool sde() const { return config_.algorithm_type == "sde-dpmsolver++"; }
  bool data_prediction() const { return config_.algorithm_type == "dpmsolver++" || sde(); }
  std::vector<float> train_sigmas_;
};

}  // namespace octodiff
