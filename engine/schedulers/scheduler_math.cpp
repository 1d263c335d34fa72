#include "schedulers/scheduler_math.h"

#include <algorithm>
#include <cmath>

// Round every a·b + c as written, like torch's separate element-wise kernels and numpy's
// baseline build (GCC would otherwise fuse them into FMAs in C++ even in ISO mode); the FMAs
// the references do contain are written as std::fma.
#pragma GCC optimize("fp-contract=off")

namespace octodiff::sched {

std::vector<double> numpy_linspace(double start, double stop, int64_t num) {
  std::vector<double> out(static_cast<size_t>(num));
  if (num == 1) {
    out[0] = start;
    return out;
  }
  const double step = (stop - start) / static_cast<double>(num - 1);
  for (int64_t i = 0; i < num; ++i) out[i] = static_cast<double>(i) * step + start;
  if (num > 1) out[num - 1] = stop;
  return out;
}

std::vector<double> numpy_arange(double start, double stop, double step) {
  const double length = std::ceil((stop - start) / step);
  if (!(length > 0)) return {};
  std::vector<double> out(static_cast<size_t>(length));
  out[0] = start;
  if (out.size() > 1) out[1] = start + step;
  const double delta = out.size() > 1 ? out[1] - out[0] : step;
  for (size_t i = 2; i < out.size(); ++i) out[i] = start + static_cast<double>(i) * delta;
  return out;
}

double round_half_even(double x) {
  return std::nearbyint(x);
}  // default FE_TONEAREST mode

std::vector<float> torch_linspace_f32(float start, float end, int64_t steps, int vector_width) {
  std::vector<float> out(static_cast<size_t>(steps));
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  // The element (or, in the vector loop, the chunk base) counts from `start` in the first half
  // and back from `end` in the second. ATen's CPU kernels are built with FMA contraction, so
  // `start + step·idx` (and `base + k·step` below) are single fused operations there.
  auto anchored = [&](int64_t idx) {
    return idx < halfway ? std::fma(step, static_cast<float>(idx), start)
                         : std::fma(-step, static_cast<float>(steps - idx - 1), end);
  };
  int64_t i = 0;
  if (vector_width > 0) {
    // ATen's vectorized_loop handles two vectors per iteration while they fit, then falls back
    // to the scalar lambda for the tail.
    const int64_t w = vector_width;
    const int64_t vector_end = steps / (2 * w) * (2 * w);
    for (; i < vector_end; i += w) {
      const float base = anchored(i);
      for (int64_t k = 0; k < w; ++k) out[i + k] = std::fma(static_cast<float>(k), step, base);
    }
  }
  for (; i < steps; ++i) out[i] = anchored(i);
  return out;
}

std::vector<float> jax_linspace_f32(float start, float stop, int64_t num) {
  std::vector<float> out(static_cast<size_t>(num));
  if (num == 1) {
    out[0] = start;
    return out;
  }
  const float div = static_cast<float>(num - 1);
  for (int64_t i = 0; i < num - 1; ++i) {
    const float s = static_cast<float>(i) / div;
    out[i] = start * (1.0f - s) + stop * s;
  }
  out[num - 1] = stop;
  return out;
}

std::vector<float> make_betas(const SchedulerConfig& config, SchedulerSemantics semantics) {
  const int64_t n = config.num_train_timesteps;
  std::vector<float> betas;
  if (!config.trained_betas.empty()) {
    for (double b : config.trained_betas) betas.push_back(static_cast<float>(b));
    return betas;
  }
  // torch.linspace fills through ATen's vectorised CPU loop (fused chunk base + k·step). With 4,
  // 8 or 16 lanes this, with the double cumprod, reproduces the golden alphas_cumprod bit for
  // bit; the scalar formula, or unfused arithmetic, misses by up to 4 ulp.
  constexpr int kTorchVectorWidth = 8;
  auto linspace = [&](double a, double b) {
    return semantics == SchedulerSemantics::Diffusers
               ? torch_linspace_f32(static_cast<float>(a), static_cast<float>(b), n, kTorchVectorWidth)
               : jax_linspace_f32(static_cast<float>(a), static_cast<float>(b), n);
  };
  if (config.beta_schedule == "linear") {
    betas = linspace(config.beta_start, config.beta_end);
  } else if (config.beta_schedule == "scaled_linear") {
    // Python takes the square roots in double (`beta_start**0.5`), the library squares in f32.
    betas = linspace(std::pow(config.beta_start, 0.5), std::pow(config.beta_end, 0.5));
    for (float& b : betas) b = b * b;
  } else if (config.beta_schedule == "squaredcos_cap_v2") {
    auto alpha_bar = [](double t) {
      const double c = std::cos((t + 0.008) / 1.008 * M_PI / 2);
      return c * c;
    };
    for (int64_t i = 0; i < n; ++i) {
      const double t1 = static_cast<double>(i) / static_cast<double>(n);
      const double t2 = static_cast<double>(i + 1) / static_cast<double>(n);
      betas.push_back(static_cast<float>(std::min(1 - alpha_bar(t2) / alpha_bar(t1), 0.999)));
    }
  } else {
    fail("beta_schedule '", config.beta_schedule, "' is not supported");
  }
  return betas;
}

std::vector<float> make_alphas_cumprod(const std::vector<float>& betas, SchedulerSemantics semantics) {
  std::vector<float> out(betas.size());
  if (semantics == SchedulerSemantics::Diffusers) {
    double product = 1.0;  // ATen's CPU cumprod accumulates float in double
    for (size_t i = 0; i < betas.size(); ++i) {
      product *= static_cast<double>(1.0f - betas[i]);
      out[i] = static_cast<float>(product);
    }
  } else {
    float product = 1.0f;
    for (size_t i = 0; i < betas.size(); ++i) {
      product *= 1.0f - betas[i];
      out[i] = product;
    }
  }
  return out;
}

std::vector<float> rescale_zero_terminal_snr(const std::vector<float>& betas) {
  const size_t n = betas.size();
  std::vector<float> root = make_alphas_cumprod(betas, SchedulerSemantics::Diffusers);
  for (float& a : root) a = std::sqrt(a);
  const float first = root.front(), last = root.back();
  if (!(first > last)) fail("rescale_betas_zero_snr needs betas that are not all 0");
  const float scale = first / (first - last);
  for (float& a : root) a = (a - last) * scale;  // two f32 roundings, as `-=` then `*=`
  std::vector<float> out(n);
  out[0] = 1.0f - root[0] * root[0];
  for (size_t i = 1; i < n; ++i) out[i] = 1.0f - (root[i] * root[i]) / (root[i - 1] * root[i - 1]);
  return out;
}

std::vector<float> training_sigmas(const std::vector<float>& alphas_cumprod) {
  std::vector<float> sigmas(alphas_cumprod.size());
  for (size_t i = 0; i < sigmas.size(); ++i) {
    const float a = alphas_cumprod[i];
    sigmas[i] = std::sqrt((1.0f - a) / a);
  }
  return sigmas;
}

double numpy_interp(double x, const std::vector<float>& fp) {
  const int64_t n = static_cast<int64_t>(fp.size());
  if (x <= 0) return fp[0];
  if (x >= static_cast<double>(n - 1)) return fp[n - 1];
  const int64_t j = static_cast<int64_t>(std::floor(x));
  if (static_cast<double>(j) == x) return fp[j];  // numpy returns exact hits unchanged
  const double slope = (static_cast<double>(fp[j + 1]) - static_cast<double>(fp[j])) / 1.0;
  return slope * (x - static_cast<double>(j)) + static_cast<double>(fp[j]);
}

float jax_interp(float x, const std::vector<float>& fp) {
  const int64_t n = static_cast<int64_t>(fp.size());
  if (x < 0) return fp[0];
  if (x > static_cast<float>(n - 1)) return fp[n - 1];
  // i = searchsorted(xp, x, side="right") clipped to [1, n-1]
  const int64_t i = std::clamp<int64_t>(static_cast<int64_t>(std::floor(x)) + 1, 1, n - 1);
  const float df = fp[i] - fp[i - 1];
  const float delta = x - static_cast<float>(i - 1);
  return fp[i - 1] + (delta / 1.0f) * df;
}

int find_timestep(const std::vector<double>& grid, double t) {
  for (size_t k = 0; k < grid.size(); ++k)
    if (grid[k] == t) return static_cast<int>(k);
  return -1;
}

std::vector<double> leading_grid(int num_train, int n, int offset) {
  const int ratio = num_train / n;
  std::vector<double> grid(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) grid[k] = static_cast<double>((n - 1 - k) * ratio + offset);
  return grid;
}

std::vector<double> trailing_grid(int num_train, int n, bool round_in_f32) {
  std::vector<double> grid;
  for (double v : numpy_arange(num_train, 0, -static_cast<double>(num_train) / n)) {
    const double x = round_in_f32 ? static_cast<double>(static_cast<float>(v)) : v;
    grid.push_back(round_half_even(x) - 1);
  }
  if (static_cast<int>(grid.size()) != n)
    fail("timestep_spacing 'trailing' with ", n, " steps gives ", grid.size(),
         " timesteps in diffusers (a numpy arange rounding artefact ending at t = -1); use another number of "
         "steps or another timestep_spacing");
  return grid;
}

std::vector<double> ddim_family_grid(const SchedulerConfig& config, SchedulerSemantics semantics, int n) {
  const int T = config.num_train_timesteps;
  const TimestepSpacing spacing =
      semantics == SchedulerSemantics::Flax ? TimestepSpacing::Leading : config.timestep_spacing;
  std::vector<double> grid;
  switch (spacing) {
    case TimestepSpacing::Linspace: {
      const std::vector<double> points = numpy_linspace(0, T - 1, n);
      for (auto it = points.rbegin(); it != points.rend(); ++it) grid.push_back(round_half_even(*it));
      break;
    }
    case TimestepSpacing::Leading:
      grid = leading_grid(T, n, config.steps_offset);
      break;
    case TimestepSpacing::Trailing:
      grid = trailing_grid(T, n, false);
      break;
  }
  return grid;
}

float alpha_at(const std::vector<float>& alphas_cumprod, int t) {
  if (t < 0 || t >= static_cast<int>(alphas_cumprod.size()))
    fail("timestep ", t, " is outside the training range [0, ", alphas_cumprod.size(), ")");
  return alphas_cumprod[t];
}

std::vector<float> sigma_family_timesteps(const SchedulerConfig& config, int n) {
  const int T = config.num_train_timesteps;
  std::vector<float> grid;  // float32, as torch stores them
  switch (config.timestep_spacing) {
    case TimestepSpacing::Linspace: {
      const std::vector<double> v = numpy_linspace(0, T - 1, n);
      for (auto it = v.rbegin(); it != v.rend(); ++it) grid.push_back(static_cast<float>(*it));
      break;
    }
    case TimestepSpacing::Leading:
      for (double t : leading_grid(T, n, 0))
        grid.push_back(static_cast<float>(t) + static_cast<float>(config.steps_offset));
      break;
    case TimestepSpacing::Trailing:
      for (double t : trailing_grid(T, n, false)) grid.push_back(static_cast<float>(t));
      break;
  }
  return grid;
}

SchedulerState sigma_family_state(const SchedulerConfig& config, const std::vector<float>& train_sigmas, int n,
                                  float final_sigma) {
  check_num_steps(config, n);
  SchedulerState state;
  state.num_inference_steps = n;
  for (float t : sigma_family_timesteps(config, n)) {
    state.timesteps.push_back(t);
    state.sigmas.push_back(static_cast<float>(numpy_interp(t, train_sigmas)));
  }
  state.sigmas.push_back(final_sigma);
  return state;
}

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int n) {
  constexpr double rho = 7.0;
  const double min_inv_rho = std::pow(sigma_min, 1 / rho), max_inv_rho = std::pow(sigma_max, 1 / rho);
  std::vector<double> out;
  for (double r : numpy_linspace(0, 1, n))
    out.push_back(std::pow(max_inv_rho + r * (min_inv_rho - max_inv_rho), rho));
  return out;
}

double sigma_to_timestep(double sigma, const std::vector<float>& log_train_sigmas) {
  const int n = static_cast<int>(log_train_sigmas.size());
  const float log_sigma = static_cast<float>(std::log(std::max(sigma, 1e-10)));
  // argmax of the running count of (log σ − table ≥ 0): the last such entry, or 0 when none is.
  int low = 0;
  for (int j = 0; j < n; ++j)
    if (log_sigma - log_train_sigmas[j] >= 0.0f) low = j;
  low = std::min(low, n - 2);
  const float lo = log_train_sigmas[low], hi = log_train_sigmas[low + 1];
  const float w = std::clamp((lo - log_sigma) / (lo - hi), 0.0f, 1.0f);
  return static_cast<double>(1.0f - w) * low + static_cast<double>(w) * (low + 1);
}

std::vector<float> log_sigmas(const std::vector<float>& train_sigmas) {
  std::vector<float> out;
  for (float s : train_sigmas) out.push_back(std::log(s));
  return out;
}

SchedulerState karras_sigma_family_state(const SchedulerConfig& config,
                                         const std::vector<float>& train_sigmas, int n, float final_sigma,
                                         bool timesteps_in_f32) {
  check_num_steps(config, n);
  const std::vector<float> grid = sigma_family_timesteps(config, n);
  const double sigma_max = config.sigma_max.value_or(numpy_interp(grid.front(), train_sigmas));
  const double sigma_min = config.sigma_min.value_or(numpy_interp(grid.back(), train_sigmas));
  const std::vector<float> logs = log_sigmas(train_sigmas);
  SchedulerState state;
  state.num_inference_steps = n;
  for (double sigma : karras_sigmas(sigma_min, sigma_max, n)) {
    const double t = sigma_to_timestep(sigma, logs);
    state.timesteps.push_back(timesteps_in_f32 ? static_cast<float>(t) : t);
    state.sigmas.push_back(static_cast<float>(sigma));
  }
  state.sigmas.push_back(final_sigma);
  return state;
}

double sigma_family_init_noise_sigma(float max_sigma, TimestepSpacing spacing) {
  if (spacing == TimestepSpacing::Leading) return std::sqrt(max_sigma * max_sigma + 1.0f);
  return max_sigma;
}

Tensor sigma_family_scale_input(const Tensor& sample, float sigma) {
  const float scale = std::sqrt(sigma * sigma + 1.0f);
  return elementwise([=](float x) { return x / scale; }, sample);
}

Tensor sigma_family_x0(PredictionType prediction, float sigma, const Tensor& model_output, const Tensor& sample) {
  switch (prediction) {
    case PredictionType::Epsilon:
      return elementwise([=](float x, float m) { return x - sigma * m; }, sample, model_output);
    case PredictionType::VPrediction: {
      const float c_out = -sigma / std::sqrt(sigma * sigma + 1.0f), c_in = sigma * sigma + 1.0f;
      return elementwise([=](float x, float m) { return m * c_out + x / c_in; }, sample, model_output);
    }
    case PredictionType::Sample:
      return model_output;
  }
  fail("unknown prediction type");
}

void check_num_steps(const SchedulerConfig& config, int n) {
  if (n < 1) fail("the number of inference steps must be at least 1 (got ", n, ")");
  if (n > config.num_train_timesteps)
    fail("the number of inference steps (", n, ") cannot exceed the scheduler's num_train_timesteps (",
         config.num_train_timesteps, ")");
}

void check_call(const SchedulerState& state, int i, const char* what) {
  if (state.num_inference_steps == 0) fail(what, ": call set_timesteps() first");
  if (i < 0 || i >= static_cast<int>(state.timesteps.size()))
    fail(what, ": step index ", i, " is outside the ", state.timesteps.size(), " timesteps");
}

void check_step(const SchedulerState& state, int i, const char* what) {
  check_call(state, i, what);
  if (i != state.step_index)
    fail(what, ": step ", i, " called on a state that has completed ", state.step_index,
         " steps (steps must run in order from the state set_timesteps returned)");
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  if (a.shape() != b.shape())
    fail(what, ": tensor shapes differ: ", shape_str(a.shape()), " vs ", shape_str(b.shape()));
}

}  // namespace octodiff::sched
