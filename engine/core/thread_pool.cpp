#include "core/thread_pool.h"

#include <immintrin.h>

#include <chrono>

namespace octodiff {
namespace {

// Spin this long for new work before sleeping: kernels of one network call follow each other
// within microseconds, and a futex wake-up costs tens of them.
constexpr auto kSpin = std::chrono::microseconds(50);

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { helper_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
  }
  job_cv_.notify_all();
  for (auto& t : helpers_) t.join();
}

bool ThreadPool::take_and_run_chunk(uint32_t generation) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(t >> 32) != generation) return false;
    const int64_t chunk = static_cast<int64_t>(t & 0xffffffffu);
    if (chunk >= chunks_) return false;
    if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) {
      // Holding an unfinished chunk of this generation pins fn_ and chunks_: the caller cannot
      // publish the next job before done_ reaches chunks_.
      try {
        (*fn_)(chunk);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks_) {
        {
          std::lock_guard<std::mutex> lock(sleep_mutex_);
        }
        done_cv_.notify_all();
      }
      return true;
    }
  }
}

void ThreadPool::helper_loop() {
  // Start from 0, not the current value: a helper that starts late must still see the jobs (and
  // the stop) published before it ran.
  uint32_t seen = 0;
  for (;;) {
    // Wait for a new job: spin briefly, then sleep on the futex.
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (wake_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < deadline)
      _mm_pause();
    if (wake_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      job_cv_.wait(lock, [&] { return wake_.load(std::memory_order_acquire) != seen || stop_.load(); });
    }
    seen = wake_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    const uint32_t generation = static_cast<uint32_t>(ticket_.load(std::memory_order_acquire) >> 32);
    while (take_and_run_chunk(generation)) {
    }
  }
}

void ThreadPool::run(int64_t chunks, const std::function<void(int64_t)>& fn) {
  if (chunks <= 0) return;
  if (helpers_.empty() || chunks == 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  fn_ = &fn;
  chunks_ = chunks;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = static_cast<uint32_t>(ticket_.load() >> 32) + 1;
  ticket_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  {
    // Taking the mutex orders this wake-up after any helper's check-then-sleep.
    std::lock_guard<std::mutex> lock(sleep_mutex_);
  }
  job_cv_.notify_all();
  while (take_and_run_chunk(generation)) {
  }
  // Wait for chunks other threads are still running.
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  int64_t d = done_.load(std::memory_order_acquire);
  while (d < chunks && std::chrono::steady_clock::now() < deadline) {
    _mm_pause();
    d = done_.load(std::memory_order_acquire);
  }
  if (d < chunks) {
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    done_cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire) >= chunks; });
  }
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace octodiff
