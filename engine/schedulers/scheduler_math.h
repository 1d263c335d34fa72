// Internal helpers shared by the five schedulers: the number grids of numpy, torch and JAX
// reproduced to the last bit, the noise tables, and element-wise tensor arithmetic.
//
// Parity depends on rounding exactly where the reference rounds, so every helper states which
// library's arithmetic it mirrors. Scalars the reference keeps as float32 (torch 0-dim tensors,
// JAX f32 arrays) are `float` here; numpy float64 host math is `double`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "schedulers/scheduler.h"

namespace octodiff::sched {

// ---- grids -------------------------------------------------------------------------------------

// np.linspace(start, stop, num) in float64: start + i·((stop − start)/(num − 1)), last = stop.
std::vector<double> numpy_linspace(double start, double stop, int64_t num);
// np.arange(start, stop, step) for a float step, including numpy's length rule
// ceil((stop − start)/step) and its fill rule (element i ≥ 2 is start + i·(x[1] − x[0])).
std::vector<double> numpy_arange(double start, double stop, double step);
// np.round / jnp.round: round half to even.
double round_half_even(double x);
// torch.linspace(start, end, steps, dtype=float32) on the CPU, including the split at `halfway`
// and the vectorised chunks (base + k·step within each SIMD vector of `vector_width` lanes).
std::vector<float> torch_linspace_f32(float start, float end, int64_t steps, int vector_width);
// jnp.linspace(start, stop, num, dtype=float32): start·(1 − s) + stop·s with s = f32(i)/f32(num−1).
std::vector<float> jax_linspace_f32(float start, float stop, int64_t num);

// ---- noise tables ------------------------------------------------------------------------------

// Betas for the config as the reference builds them (f32). `semantics` selects torch or JAX
// linspace rounding.
std::vector<float> make_betas(const SchedulerConfig& config, SchedulerSemantics semantics);
// diffusers' rescale_zero_terminal_snr(betas) in torch's f32 arithmetic: √ᾱ shifted so its last
// entry is 0 and scaled so its first is unchanged, then turned back into betas (the last is 1).
std::vector<float> rescale_zero_terminal_snr(const std::vector<float>& betas);
// cumprod(1 − betas) in f32 (torch accumulates in double on the CPU; XLA in f32).
std::vector<float> make_alphas_cumprod(const std::vector<float>& betas, SchedulerSemantics semantics);
// Training sigmas ((1 − ā)/ā)^0.5 in f32, index = training timestep.
std::vector<float> training_sigmas(const std::vector<float>& alphas_cumprod);
// np.interp(x, arange(n), fp) in float64 (exact hits return fp[j] unchanged), x in [0, n−1].
double numpy_interp(double x, const std::vector<float>& fp);
// jnp.interp(x, arange(n), fp) in float32.
float jax_interp(float x, const std::vector<float>& fp);

// Index of the first entry of `grid` equal to `t`, or -1.
int find_timestep(const std::vector<double>& grid, double t);
// "leading" grid shared by the torch schedulers: reverse(arange(n)·(T // n)) + offset.
std::vector<double> leading_grid(int num_train, int n, int offset);
// "trailing" grid: round(np.arange(T, 0, −T/n)) − 1, descending. `round_in_f32` rounds the f32
// value (jnp holds the numpy result as f32). For some n (61, 103, ...) numpy's arange returns
// n + 1 values, the last rounding to −1; diffusers then indexes alphas_cumprod[−1]. That is
// refused with an Error instead of reproduced.
std::vector<double> trailing_grid(int num_train, int n, bool round_in_f32);
// The integer grid of DDIM and PNDM, descending. Diffusers semantics by config.timestep_spacing:
// linspace = round(np.linspace(0, T−1, n)) reversed, leading = leading_grid(T, n, steps_offset),
// trailing = trailing_grid(T, n, false); Flax semantics always leading (the Flax classes have no
// spacing option).
std::vector<double> ddim_family_grid(const SchedulerConfig& config, SchedulerSemantics semantics, int n);
// alphas_cumprod[t] with an Error (not an exception of std::vector) outside the table.
float alpha_at(const std::vector<float>& alphas_cumprod, int t);

// ---- the sigma family: LMS, Euler, Euler ancestral (torch semantics) ---------------------------

// The f32 timestep grid these torch classes build for config.timestep_spacing, identically in all
// three: linspace = np.linspace(0, T−1, n) reversed; leading = reverse(arange(n)·(T//n)) +
// steps_offset; trailing = round(arange(T, 0, −T/n)) − 1.
std::vector<float> sigma_family_timesteps(const SchedulerConfig& config, int n);
// A fresh state on that grid: sigmas = np.interp(t, arange(T), training sigmas) rounded to f32,
// then `final_sigma` appended.
SchedulerState sigma_family_state(const SchedulerConfig& config, const std::vector<float>& train_sigmas, int n,
                                  float final_sigma);
// init_noise_sigma of these classes from the largest sigma: max σ for linspace and trailing,
// sqrt(max σ² + 1) for leading, in f32.
double sigma_family_init_noise_sigma(float max_sigma, TimestepSpacing spacing);
// 1/sqrt(σ² + 1)-scaled model input (f32: x / sqrt(σ·σ + 1)).
Tensor sigma_family_scale_input(const Tensor& sample, float sigma);
// x0 from the model output at noise level σ (f32): epsilon x − σ·m; v_prediction
// m·(−σ/sqrt(σ²+1)) + x/(σ²+1); sample m.
Tensor sigma_family_x0(PredictionType prediction, float sigma, const Tensor& model_output, const Tensor& sample);

// ---- Karras sigmas (use_karras_sigmas of LMS, Euler and DPM-Solver; torch semantics) -----------

// Karras et al.'s schedule as diffusers' _convert_to_karras builds it, in float64 with rho = 7:
// (max^(1/ρ) + r·(min^(1/ρ) − max^(1/ρ)))^ρ for r in np.linspace(0, 1, n), from σ_max down to σ_min.
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int n);
// diffusers' _sigma_to_t: the fractional training timestep at which the training sigmas' logs
// (`log_train_sigmas`, float32 as np.log of the float32 sigmas gives them), interpolated linearly,
// reach log σ; clamped to [0, T − 1]. Rounds where numpy 1.x (Debian's, the reference) rounds
// there: log σ in float64 meets the float32 table as float32, the weight is float32, the blend
// float64.
double sigma_to_timestep(double sigma, const std::vector<float>& log_train_sigmas);
// np.log of the float32 training sigmas, in float32.
std::vector<float> log_sigmas(const std::vector<float>& train_sigmas);
// The Karras state of LMS and Euler (torch): the family's grid for config.timestep_spacing and its
// np.interp sigmas give σ_max and σ_min (its first and last; Euler's config.sigma_min/sigma_max
// when set); karras_sigmas between them; timesteps from sigma_to_timestep (held as float32 when
// `timesteps_in_f32`, as Euler does; LMS keeps float64); sigmas rounded to float32, then
// `final_sigma` appended.
SchedulerState karras_sigma_family_state(const SchedulerConfig& config,
                                         const std::vector<float>& train_sigmas, int n, float final_sigma,
                                         bool timesteps_in_f32);

// Shared argument checks of set_timesteps/step.
void check_num_steps(const SchedulerConfig& config, int n);
void check_call(const SchedulerState& state, int i, const char* what);
// check_call plus: step() must be called for i = 0, 1, 2, ... in order (state.step_index == i).
void check_step(const SchedulerState& state, int i, const char* what);
void check_same_shape(const Tensor& a, const Tensor& b, const char* what);

// ---- element-wise tensor arithmetic -----------------------------------------------------------

// out[i] = f(first[i], rest[i]...) into a new tensor (inputs are never modified).
template <typename F, typename... Rest>
Tensor elementwise(F f, const Tensor& first, const Rest&... rest) {
  (check_same_shape(first, rest, "elementwise"), ...);
  Tensor out = Tensor::empty(first.shape());
  float* o = out.data();
  const int64_t n = first.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = f(first[i], rest[i]...);
  return out;
}

}  // namespace octodiff::sched
