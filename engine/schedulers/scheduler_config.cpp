// SchedulerConfig: class defaults, scheduler_config.json parsing and validation.
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "schedulers/scheduler.h"

namespace octodiff {
namespace {

using nlohmann::json;

const char* prediction_name(PredictionType p) {
  switch (p) {
    case PredictionType::Epsilon:
      return "epsilon";
    case PredictionType::VPrediction:
      return "v_prediction";
    case PredictionType::Sample:
      return "sample";
  }
  return "?";
}

PredictionType parse_prediction(const std::string& s) {
  if (s == "epsilon") return PredictionType::Epsilon;
  if (s == "v_prediction") return PredictionType::VPrediction;
  if (s == "sample") return PredictionType::Sample;
  fail("scheduler config: prediction_type '", s, "' is not supported (use epsilon, v_prediction or sample)");
}

TimestepSpacing parse_spacing(const std::string& s) {
  if (s == "leading" || s == "linspace" || s == "trailing") return parse_timestep_spacing(s);
  fail("scheduler config: timestep_spacing '", s, "' is not supported (use leading, linspace or trailing)");
}

// Python's json module writes float('inf') and float('nan') as the bare words Infinity,
// -Infinity and NaN, which strict JSON parsers reject (diffusers saves lambda_min_clipped = -inf
// this way). Quote them outside strings so the document parses; number readers accept them.
std::string quote_nonfinite_words(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const std::string w = word;
      if (text.compare(i, w.size(), w) == 0) {
        out += '"' + w + '"';
        i += w.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

double number_value(const json& v, const std::string& key) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  }
  fail("scheduler config: '", key, "' must be a number, got ", v.dump());
}

int int_value(const json& v, const std::string& key) {
  if (!v.is_number_integer() || v.get<int64_t>() < std::numeric_limits<int>::min() ||
      v.get<int64_t>() > std::numeric_limits<int>::max())
    fail("scheduler config: '", key, "' must be an integer, got ", v.dump());
  return v.get<int>();
}

bool bool_value(const json& v, const std::string& key) {
  if (v.is_null()) return false;  // Optional[bool] = None behaves as False in diffusers
  if (!v.is_boolean()) fail("scheduler config: '", key, "' must be true or false, got ", v.dump());
  return v.get<bool>();
}

std::string string_value(const json& v, const std::string& key) {
  if (!v.is_string()) fail("scheduler config: '", key, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}

bool is_one_of(SchedulerKind kind, std::initializer_list<SchedulerKind> kinds) {
  for (SchedulerKind k : kinds)
    if (k == kind) return true;
  return false;
}

// Options of the diffusers class that this port does not implement. Left at their defaults
// they change nothing; any other value is refused rather than silently ignored.
void reject_unsupported_options(const json& j, SchedulerKind kind) {
  using K = SchedulerKind;
  const auto flag = [&](const char* key, std::initializer_list<SchedulerKind> kinds) {
    auto it = j.find(key);
    if (it != j.end() && is_one_of(kind, kinds) && bool_value(*it, key))
      fail("scheduler config: '", key, "' = true is not supported by this ", scheduler_class_name(kind));
  };
  flag("thresholding", {K::Ddim, K::DpmSolverPP, K::DpmSolverSde, K::Lcm});
  flag("use_exponential_sigmas", {K::Lms, K::Euler, K::DpmSolverPP, K::DpmSolverSde});
  flag("use_beta_sigmas", {K::Lms, K::Euler, K::DpmSolverPP, K::DpmSolverSde});
  flag("use_lu_lambdas", {K::DpmSolverPP, K::DpmSolverSde});
  flag("euler_at_final", {K::DpmSolverPP, K::DpmSolverSde});
  const auto exact = [&](const char* key, SchedulerKind k, const json& allowed) {
    auto it = j.find(key);
    if (it != j.end() && kind == k && *it != allowed)
      fail("scheduler config: '", key, "' = ", it->dump(), " is not supported by this ",
           scheduler_class_name(kind), " (only ", allowed.dump(), ")");
  };
  exact("variance_type", K::DpmSolverPP, nullptr);
  exact("variance_type", K::DpmSolverSde, nullptr);
  exact("timestep_type", K::Euler, "discrete");
  exact("interpolation_type", K::Euler, "linear");
  if (auto it = j.find("lambda_min_clipped");
      it != j.end() && (kind == K::DpmSolverPP || kind == K::DpmSolverSde)) {
    const double v = number_value(*it, "lambda_min_clipped");
    if (!(std::isinf(v) && v < 0))
      fail("scheduler config: 'lambda_min_clipped' = ", it->dump(), " is not supported (only -Infinity)");
  }
}

json parse_config_object(const std::string& json_text) {
  json j;
  try {
    j = json::parse(quote_nonfinite_words(json_text));
  } catch (const json::exception& e) {
    fail("scheduler config is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail("scheduler config must be a JSON object, got ", j.type_name());
  return j;
}

}  // namespace

namespace {

std::optional<std::string> class_name_of(const json& j) {
  auto it = j.find("_class_name");
  if (it == j.end()) return std::nullopt;
  return string_value(*it, "_class_name");
}

}  // namespace

std::optional<std::string> scheduler_config_class_name(const std::string& json_text) {
  return class_name_of(parse_config_object(json_text));
}

std::optional<SchedulerKind> scheduler_config_kind(const std::string& json_text) {
  const json j = parse_config_object(json_text);
  const std::optional<std::string> cls = class_name_of(j);
  if (!cls) return std::nullopt;
  std::optional<SchedulerKind> kind = scheduler_kind_from_class_name(*cls);
  if (kind == SchedulerKind::DpmSolverPP) {
    auto it = j.find("algorithm_type");
    if (it != j.end() && string_value(*it, "algorithm_type") == "sde-dpmsolver++")
      kind = SchedulerKind::DpmSolverSde;
  }
  return kind;
}

SchedulerConfig SchedulerConfig::defaults(SchedulerKind kind) {
  // The constructor defaults of each diffusers class (torch and Flax agree on these).
  SchedulerConfig c;
  c.set_alpha_to_one = false;
  c.skip_prk_steps = false;
  c.clip_sample = false;
  c.timestep_spacing = TimestepSpacing::Linspace;
  switch (kind) {
    case SchedulerKind::Pndm:
      c.timestep_spacing = TimestepSpacing::Leading;
      break;
    case SchedulerKind::Ddim:
      c.timestep_spacing = TimestepSpacing::Leading;
      c.clip_sample = true;
      c.set_alpha_to_one = true;
      break;
    case SchedulerKind::Lms:
    case SchedulerKind::Euler:
    case SchedulerKind::EulerAncestral:
    case SchedulerKind::DpmSolverPP:
      break;
    case SchedulerKind::DpmSolverSde:
      c.algorithm_type = "sde-dpmsolver++";
      break;
    case SchedulerKind::Lcm:  // LCMScheduler's own defaults: SD's betas, alpha one at the end
      c.beta_start = 0.00085;
      c.beta_end = 0.012;
      c.beta_schedule = "scaled_linear";
      c.set_alpha_to_one = true;
      c.timestep_spacing = TimestepSpacing::Leading;
      break;
  }
  return c;
}

SchedulerConfig SchedulerConfig::from_json(const std::string& json_text, SchedulerKind kind) {
  const json j = parse_config_object(json_text);
  SchedulerConfig c = defaults(kind);
  const auto has = [&](const char* key) { return j.contains(key); };
  if (has("num_train_timesteps"))
    c.num_train_timesteps = int_value(j.at("num_train_timesteps"), "num_train_timesteps");
  if (has("beta_start")) c.beta_start = number_value(j["beta_start"], "beta_start");
  if (has("beta_end")) c.beta_end = number_value(j["beta_end"], "beta_end");
  if (has("beta_schedule")) c.beta_schedule = string_value(j["beta_schedule"], "beta_schedule");
  if (has("trained_betas") && !j["trained_betas"].is_null()) {
    const json& tb = j["trained_betas"];
    if (!tb.is_array()) fail("scheduler config: 'trained_betas' must be null or a list of numbers");
    c.trained_betas.clear();
    for (const json& b : tb) c.trained_betas.push_back(number_value(b, "trained_betas"));
  }
  if (has("set_alpha_to_one")) c.set_alpha_to_one = bool_value(j["set_alpha_to_one"], "set_alpha_to_one");
  if (has("skip_prk_steps")) c.skip_prk_steps = bool_value(j["skip_prk_steps"], "skip_prk_steps");
  if (has("steps_offset")) c.steps_offset = int_value(j["steps_offset"], "steps_offset");
  if (has("clip_sample")) c.clip_sample = bool_value(j["clip_sample"], "clip_sample");
  if (has("clip_sample_range"))
    c.clip_sample_range = number_value(j["clip_sample_range"], "clip_sample_range");
  if (has("prediction_type"))
    c.prediction_type = parse_prediction(string_value(j["prediction_type"], "prediction_type"));
  if (has("timestep_spacing"))
    c.timestep_spacing = parse_spacing(string_value(j["timestep_spacing"], "timestep_spacing"));
  if (has("solver_order")) c.solver_order = int_value(j["solver_order"], "solver_order");
  if (has("lower_order_final")) c.lower_order_final = bool_value(j["lower_order_final"], "lower_order_final");
  if (has("algorithm_type")) c.algorithm_type = string_value(j["algorithm_type"], "algorithm_type");
  // The kind chooses between the class's ODE and SDE solvers (a file's "sde-dpmsolver++" makes its
  // own kind DpmSolverSde: scheduler_config_kind), whatever the file's algorithm_type says.
  if (kind == SchedulerKind::DpmSolverSde) c.algorithm_type = "sde-dpmsolver++";
  if (kind == SchedulerKind::DpmSolverPP && c.algorithm_type == "sde-dpmsolver++")
    c.algorithm_type = "dpmsolver++";
  if (has("solver_type")) c.solver_type = string_value(j["solver_type"], "solver_type");
  if (has("final_sigmas_type"))
    c.final_sigmas_type = string_value(j["final_sigmas_type"], "final_sigmas_type");
  if (has("original_inference_steps") && !j["original_inference_steps"].is_null())
    c.original_inference_steps = int_value(j["original_inference_steps"], "original_inference_steps");
  if (has("timestep_scaling")) c.timestep_scaling = number_value(j["timestep_scaling"], "timestep_scaling");
  // Only the classes that have the option read it (PNDMScheduler.from_config ignores the key).
  if (has("use_karras_sigmas") && supports_karras_sigmas(kind))
    c.use_karras_sigmas = bool_value(j["use_karras_sigmas"], "use_karras_sigmas");
  if (has("rescale_betas_zero_snr") && supports_zero_snr(kind))
    c.rescale_betas_zero_snr = bool_value(j["rescale_betas_zero_snr"], "rescale_betas_zero_snr");
  for (auto [key, field] :
       {std::pair{"sigma_min", &SchedulerConfig::sigma_min}, {"sigma_max", &SchedulerConfig::sigma_max}})
    if (has(key) && !j[key].is_null() && kind == SchedulerKind::Euler) c.*field = number_value(j[key], key);
  reject_unsupported_options(j, kind);
  c.validate(kind);
  return c;
}

void SchedulerConfig::validate(SchedulerKind kind) const {
  const std::string cls = scheduler_class_name(kind);
  if (num_train_timesteps < 2 || num_train_timesteps > 100000)
    fail(cls, ": num_train_timesteps must be between 2 and 100000 (got ", num_train_timesteps, ")");
  if (!trained_betas.empty()) {
    if (static_cast<int>(trained_betas.size()) != num_train_timesteps)
      fail(cls, ": trained_betas has ", trained_betas.size(), " values but num_train_timesteps is ",
           num_train_timesteps);
    for (double b : trained_betas)
      if (!(b >= 0 && b < 1)) fail(cls, ": trained_betas must lie in [0, 1) (found ", b, ")");
  } else {
    if (beta_schedule != "linear" && beta_schedule != "scaled_linear" && beta_schedule != "squaredcos_cap_v2")
      fail(cls, ": beta_schedule '", beta_schedule,
           "' is not supported (use linear, scaled_linear or squaredcos_cap_v2)");
    if (beta_schedule != "squaredcos_cap_v2" &&
        !(beta_start >= 0 && beta_start < 1 && beta_end >= 0 && beta_end < 1))
      fail(cls, ": beta_start and beta_end must lie in [0, 1) (got ", beta_start, ", ", beta_end, ")");
  }
  if (steps_offset < 0 || steps_offset >= num_train_timesteps)
    fail(cls, ": steps_offset must lie in [0, num_train_timesteps) (got ", steps_offset, ")");
  if (!(clip_sample_range > 0 && std::isfinite(clip_sample_range)))
    fail(cls, ": clip_sample_range must be a positive number (got ", clip_sample_range, ")");
  if (rescale_betas_zero_snr && !supports_zero_snr(kind))
    fail(cls,
         " has no zero terminal SNR (rescale_betas_zero_snr; use ddim, euler, euler-a, dpm++, dpm++-sde or "
         "lcm)");
  if ((kind == SchedulerKind::Pndm || kind == SchedulerKind::EulerAncestral) &&
      prediction_type == PredictionType::Sample)
    fail(cls, ": prediction_type '", prediction_name(prediction_type), "' is not supported (",
         kind == SchedulerKind::Pndm ? "PNDM" : "Euler ancestral", " handles epsilon and v_prediction)");
  if (kind == SchedulerKind::Lcm) {
    if (original_inference_steps < 1 || original_inference_steps > num_train_timesteps)
      fail(cls, ": original_inference_steps must lie in [1, num_train_timesteps = ", num_train_timesteps,
           "] (got ", original_inference_steps, ")");
    if (!std::isfinite(timestep_scaling))
      fail(cls, ": timestep_scaling must be a finite number (got ", timestep_scaling, ")");
  }
  if (kind == SchedulerKind::DpmSolverPP) {
    if (solver_order < 1 || solver_order > 3)
      fail(cls, ": solver_order must be 1, 2 or 3 (got ", solver_order, ")");
    if (algorithm_type != "dpmsolver++" && algorithm_type != "dpmsolver")
      fail(cls, ": algorithm_type '", algorithm_type,
           "' is not supported (use dpmsolver++, dpmsolver or sde-dpmsolver++)");
  }
  if (kind == SchedulerKind::DpmSolverSde) {
    // diffusers 0.31's third-order update has no SDE form.
    if (solver_order < 1 || solver_order > 2)
      fail(cls, ": solver_order must be 1 or 2 with algorithm_type sde-dpmsolver++ (got ", solver_order, ")");
    if (algorithm_type != "sde-dpmsolver++")
      fail(cls, ": the DPM++ 2M SDE scheduler needs algorithm_type sde-dpmsolver++ (got '", algorithm_type,
           "')");
  }
  if (kind == SchedulerKind::DpmSolverPP || kind == SchedulerKind::DpmSolverSde) {
    if (solver_type != "midpoint" && solver_type != "heun")
      fail(cls, ": solver_type '", solver_type, "' is not supported (use midpoint or heun)");
  }
  if (use_karras_sigmas)  // the only use of Euler's own bounds
    for (const auto& bound : {sigma_min, sigma_max})
      if (bound && !(*bound > 0 && std::isfinite(*bound)))
        fail(cls, ": sigma_min and sigma_max must be positive numbers (got ", *bound, ")");
  if (use_karras_sigmas && !supports_karras_sigmas(kind))
    fail(cls, " has no Karras sigmas (use_karras_sigmas: LMS, Euler and DPM++ 2M have them)");
  if (kind == SchedulerKind::DpmSolverPP || kind == SchedulerKind::DpmSolverSde ||
      kind == SchedulerKind::Euler) {
    if (final_sigmas_type != "zero" && final_sigmas_type != "sigma_min")
      fail(cls, ": final_sigmas_type '", final_sigmas_type, "' is not supported (use zero or sigma_min)");
  }
}

}  // namespace octodiff
