// Scheduler names, the factory, and the noise tables every scheduler shares.
#include "schedulers/scheduler.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

namespace octodiff {

const std::vector<SchedulerKind>& all_scheduler_kinds() {
  static const std::vector<SchedulerKind> kinds = {
      SchedulerKind::Pndm,  SchedulerKind::Ddim,           SchedulerKind::Lms, SchedulerKind::DpmSolverPP,
      SchedulerKind::Euler, SchedulerKind::EulerAncestral, SchedulerKind::Lcm, SchedulerKind::DpmSolverSde};
  return kinds;
}

SchedulerKind parse_scheduler_kind(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "pndm") return SchedulerKind::Pndm;
  if (n == "ddim") return SchedulerKind::Ddim;
  if (n == "lms") return SchedulerKind::Lms;
  if (n == "dpm++" || n == "dpmpp2m" || n == "dpm") return SchedulerKind::DpmSolverPP;
  if (n == "euler") return SchedulerKind::Euler;
  if (n == "euler-a" || n == "euler_a" || n == "euler-ancestral" || n == "euler_ancestral")
    return SchedulerKind::EulerAncestral;
  if (n == "lcm") return SchedulerKind::Lcm;
  if (n == "dpm++-sde" || n == "dpmpp2m-sde" || n == "dpm++-2m-sde") return SchedulerKind::DpmSolverSde;
  fail("unknown scheduler '", name, "' (valid: pndm, ddim, lms, dpm++, euler, euler-a, lcm, dpm++-sde)");
}

std::string scheduler_name(SchedulerKind kind) {
  switch (kind) {
    case SchedulerKind::Pndm:
      return "pndm";
    case SchedulerKind::Ddim:
      return "ddim";
    case SchedulerKind::Lms:
      return "lms";
    case SchedulerKind::DpmSolverPP:
      return "dpm++";
    case SchedulerKind::Euler:
      return "euler";
    case SchedulerKind::EulerAncestral:
      return "euler-a";
    case SchedulerKind::Lcm:
      return "lcm";
    case SchedulerKind::DpmSolverSde:
      return "dpm++-sde";
  }
  return "?";
}

std::string scheduler_class_name(SchedulerKind kind) {
  switch (kind) {
    case SchedulerKind::Pndm:
      return "PNDMScheduler";
    case SchedulerKind::Ddim:
      return "DDIMScheduler";
    case SchedulerKind::Lms:
      return "LMSDiscreteScheduler";
    case SchedulerKind::DpmSolverPP:
    case SchedulerKind::DpmSolverSde:
      return "DPMSolverMultistepScheduler";
    case SchedulerKind::Euler:
      return "EulerDiscreteScheduler";
    case SchedulerKind::EulerAncestral:
      return "EulerAncestralDiscreteScheduler";
    case SchedulerKind::Lcm:
      return "LCMScheduler";
  }
  return "?";
}

std::optional<SchedulerKind> scheduler_kind_from_class_name(const std::string& class_name) {
  for (SchedulerKind k : all_scheduler_kinds())
    if (scheduler_class_name(k) == class_name) return k;
  return std::nullopt;
}

TimestepSpacing parse_timestep_spacing(const std::string& name) {
  if (name == "leading") return TimestepSpacing::Leading;
  if (name == "linspace") return TimestepSpacing::Linspace;
  if (name == "trailing") return TimestepSpacing::Trailing;
  fail("unknown timestep spacing '", name, "' (valid: leading, linspace, trailing)");
}

std::string timestep_spacing_name(TimestepSpacing spacing) {
  switch (spacing) {
    case TimestepSpacing::Leading:
      return "leading";
    case TimestepSpacing::Linspace:
      return "linspace";
    case TimestepSpacing::Trailing:
      return "trailing";
  }
  return "?";
}

Scheduler::Scheduler(const SchedulerConfig& config, SchedulerSemantics semantics, TerminalAlpha terminal)
    : config_(config), semantics_(semantics) {
  betas_ = sched::make_betas(config_, semantics_);
  if (config_.rescale_betas_zero_snr) betas_ = sched::rescale_zero_terminal_snr(betas_);
  alphas_cumprod_ = sched::make_alphas_cumprod(betas_, semantics_);
  // ᾱ = 0 would make the last training sigma infinite: diffusers' sigma classes floor it.
  if (config_.rescale_betas_zero_snr && terminal == TerminalAlpha::SigmaFloor)
    alphas_cumprod_.back() = 0x1p-24f;
}

bool supports_zero_snr(SchedulerKind kind) {
  return kind != SchedulerKind::Pndm && kind != SchedulerKind::Lms;
}

bool supports_karras_sigmas(SchedulerKind kind) {
  return kind == SchedulerKind::Lms || kind == SchedulerKind::Euler || kind == SchedulerKind::DpmSolverPP ||
         kind == SchedulerKind::DpmSolverSde;
}

std::unique_ptr<Scheduler> Scheduler::create(SchedulerKind kind, const SchedulerConfig& config,
                                             SchedulerSemantics semantics) {
  config.validate(kind);
  // diffusers' Flax schedulers have no Karras sigmas, no zero terminal SNR and no SDE solver: the
  // torch class's algorithm runs, as for LCM and Euler ancestral.
  if (config.use_karras_sigmas || config.rescale_betas_zero_snr || kind == SchedulerKind::DpmSolverSde)
    semantics = SchedulerSemantics::Diffusers;
  switch (kind) {
    case SchedulerKind::Pndm:
      return std::make_unique<PndmScheduler>(config, semantics);
    case SchedulerKind::Ddim:
      return std::make_unique<DdimScheduler>(config, semantics);
    case SchedulerKind::Lms:
      return std::make_unique<LmsDiscreteScheduler>(config, semantics);
    case SchedulerKind::DpmSolverPP:
    case SchedulerKind::DpmSolverSde:
      return std::make_unique<DpmSolverMultistepScheduler>(config, semantics);
    case SchedulerKind::Euler:
      return std::make_unique<EulerDiscreteScheduler>(config, semantics);
    case SchedulerKind::EulerAncestral:
      return std::make_unique<EulerAncestralDiscreteScheduler>(config, semantics);
    case SchedulerKind::Lcm:
      return std::make_unique<LcmScheduler>(config, semantics);
  }
  fail("unknown scheduler kind");
}

int Scheduler::num_model_calls(const SchedulerState& state) const {
  return static_cast<int>(state.timesteps.size());
}

bool Scheduler::needs_noise(const SchedulerState&, int) const {
  return false;
}

StepResult Scheduler::step(const SchedulerState& state, const Tensor& model_output, int i, const Tensor& sample,
                           const Tensor& noise) const {
  if (!needs_noise(state, i)) return step(state, model_output, i, sample);
  const std::string cls = scheduler_class_name(kind());
  if (!noise.defined() || noise.numel() == 0)
    fail(cls, " step ", i, " adds noise but no noise tensor was given");
  sched::check_same_shape(noise, sample, (cls + " step noise").c_str());
  return step_with_noise(state, model_output, i, sample, noise);
}

StepResult Scheduler::step_with_noise(const SchedulerState&, const Tensor&, int i, const Tensor&,
                                      const Tensor&) const {
  fail(scheduler_class_name(kind()), " step ", i, " does not use noise");
}

}  // namespace octodiff
