// Scheduler names, the factory, and the noise tables every scheduler shares.
#include "schedulers/scheduler.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "schedulers/scheduler_classes.h"
#include "schedulers/scheduler_math.h"

namespace octodiff {

SchedulerKind parse_scheduler_kind(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "pndm") return SchedulerKind::Pndm;
  if (n == "ddim") return SchedulerKind::Ddim;
  if (n == "lms") return SchedulerKind::Lms;
  if (n == "dpm++" || n == "dpmpp2m" || n == "dpm") return SchedulerKind::DpmSolverPP;
  if (n == "euler") return SchedulerKind::Euler;
  fail("unknown scheduler '", name, "' (valid: pndm, ddim, lms, dpm++, euler)");
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
      return "DPMSolverMultistepScheduler";
    case SchedulerKind::Euler:
      return "EulerDiscreteScheduler";
  }
  return "?";
}

Scheduler::Scheduler(const SchedulerConfig& config, SchedulerSemantics semantics)
    : config_(config), semantics_(semantics) {
  betas_ = sched::make_betas(config_, semantics_);
  alphas_cumprod_ = sched::make_alphas_cumprod(betas_, semantics_);
}

std::unique_ptr<Scheduler> Scheduler::create(SchedulerKind kind, const SchedulerConfig& config,
                                             SchedulerSemantics semantics) {
  config.validate(kind);
  switch (kind) {
    case SchedulerKind::Pndm:
      return std::make_unique<PndmScheduler>(config, semantics);
    case SchedulerKind::Ddim:
      return std::make_unique<DdimScheduler>(config, semantics);
    case SchedulerKind::Lms:
      return std::make_unique<LmsDiscreteScheduler>(config, semantics);
    case SchedulerKind::DpmSolverPP:
      return std::make_unique<DpmSolverMultistepScheduler>(config, semantics);
    case SchedulerKind::Euler:
      return std::make_unique<EulerDiscreteScheduler>(config, semantics);
  }
  fail("unknown scheduler kind");
}

}  // namespace octodiff
