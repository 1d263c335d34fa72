// Timing helpers shared by octodiff-bench's modes (octodiff_bench.cpp, few_step.cpp).
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace octodiff::bench {

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

// Times `repeats` calls of fn; every call's time goes to *calls (in call order) when given: on a
// shared machine the spread says how far to trust the figure. Returns the median of the steady
// calls — every call after the first, which alone may pay for page faults, arena growth and cold
// caches (reported on its own from *calls) — or the one call when repeats is 1.
// after_each, when given, runs after every call, outside its time.
inline double steady_median_seconds(int repeats, const std::function<void()>& fn,
                                    std::vector<double>* calls = nullptr,
                                    const std::function<void()>& after_each = {}) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (after_each) after_each();
  }
  if (calls) *calls = t;
  return t.size() == 1 ? t[0] : median(std::vector<double>(t.begin() + 1, t.end()));
}

// Like steady_median_seconds, with a peak probe (`probe`: GFLOP/s, measured for a moment) run
// before the first call and after every call, outside the calls' times, so that each call has the
// machine's speed just before and just after it: on a shared VM whose speed swings 2x from one
// minute to the next, a peak measured once at start-up says little about a call seconds later.
// *calls gets every call's seconds, *probes the calls + 1 rates, *fraction the median over the
// steady calls (all, for one call) of (gflop / seconds) / (mean of the probes around the call).
inline double steady_median_seconds_probed(int repeats, const std::function<void()>& fn, double gflop,
                                           const std::function<double()>& probe, std::vector<double>* calls,
                                           std::vector<double>* probes, double* fraction) {
  probes->assign(1, probe());
  const double s = steady_median_seconds(repeats, fn, calls, [&] { probes->push_back(probe()); });
  std::vector<double> f;
  for (size_t r = calls->size() == 1 ? 0 : 1; r < calls->size(); ++r) {
    const double around = 0.5 * ((*probes)[r] + (*probes)[r + 1]);
    f.push_back(around > 0 ? gflop / (*calls)[r] / around : 0.0);
  }
  *fraction = median(f);
  return s;
}

// What the kernel did for this process so far: page faults served without I/O (a fresh page
// mapped, e.g. activation memory touched for the first time) and system CPU time. Their
// differences around a call count what the call cost the kernel, which a noisy VM's wall time
// cannot show.
struct ProcessCounters {
  int64_t minor_page_faults = 0;
  double system_cpu_seconds = 0;
  static ProcessCounters now() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return {static_cast<int64_t>(u.ru_minflt), static_cast<double>(u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_stime.tv_usec)};
  }
};

// Deterministic values in [-1, 1) (a linear congruential generator): inputs for timing only.
inline Tensor pseudo_random(Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    t[i] = static_cast<float>(static_cast<int32_t>(seed >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  return t;
}

}  // namespace octodiff::bench
