// parallel_for: split [0, n) into contiguous chunks over the current device's threads.
//
// Results must never depend on how the range is split: each index is computed by exactly one
// thread with the same arithmetic, so outputs are bit-identical for any thread count.
// Reductions that span indices use fixed-size chunks (see kernels), never per-thread partials.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

#include "core/device.h"

namespace octodiff {

// fn(begin, end) is called on disjoint ranges covering [0, n). `grain` is the smallest range
// worth giving a thread.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn, int64_t grain = 1) {
  if (n <= 0) return;
  int threads = current_device().threads;
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  int t = static_cast<int>(std::min<int64_t>(threads, max_chunks));
  if (t <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const DeviceContext ctx = current_device();
  // An exception may not leave an OpenMP region: keep the first one and rethrow it here.
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(t)
  {
    // OpenMP threads inherit nothing thread-local: give them this device's context (1 thread
    // each, so nested kernels do not oversubscribe).
    DeviceContext inner = ctx;
    inner.threads = 1;
    DeviceScope scope(inner);
    int id = omp_get_thread_num();
    int nt = omp_get_num_threads();
    int64_t begin = n * id / nt;
    int64_t end = n * (id + 1) / nt;
    try {
      if (begin < end) fn(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace octodiff
