// parallel_for: split [0, n) into contiguous ranges over the current device's threads.
//
// Results must never depend on how the range is split: each index is computed by exactly one
// thread with the same arithmetic, so outputs are bit-identical for any thread count.
// Reductions that span indices use fixed-size chunks (see kernels), never per-thread partials.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "core/device.h"
#include "core/thread_pool.h"

namespace octodiff {

// This thread's pool for `threads` threads (made on first use, kept for the thread's lifetime).
ThreadPool& thread_pool_for(int threads);

// fn(begin, end) is called on disjoint ranges covering [0, n). `grain` is the smallest range
// worth giving a thread. Inside fn, current_device().threads is 1, so nested loops run serially.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn, int64_t grain = 1) {
  if (n <= 0) return;
  const DeviceContext ctx = current_device();
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int t = static_cast<int>(std::min<int64_t>(ctx.threads, max_chunks));
  if (t <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  // A few chunks per thread, so that a thread the OS runs late leaves less work for the others.
  const int64_t chunks = std::min<int64_t>(max_chunks, int64_t{t} * 4);
  DeviceContext inner = ctx;
  inner.threads = 1;
  const std::function<void(int64_t)> body = [&](int64_t c) {
    DeviceScope scope(inner);
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  };
  thread_pool_for(ctx.threads).run(chunks, body);
}

}  // namespace octodiff
