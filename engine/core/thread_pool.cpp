#include "core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace octodiff {
namespace {

// Spin this long for new work before sleeping: kernels of one network call follow each other
// within microseconds, and a futex wake-up costs tens of them.
constexpr auto kSpin = std::chrono::microseconds(50);

uint32_t generation_of(uint64_t ticket) { return static_cast<uint32_t>(ticket >> 40); }

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
    if (generation_of(t) != generation) return false;
    const int64_t chunk = static_cast<int64_t>(t & kMaxChunks);
    const int64_t chunks = static_cast<int64_t>((t >> kCountBits) & kMaxChunks);
    if (chunk >= chunks) return false;
    if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) {
      // Holding an unfinished chunk of this generation pins fn_: the caller cannot publish the
      // next job before done_ reaches this job's count.
      try {
        (*fn_)(chunk);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
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
    const uint32_t generation = generation_of(ticket_.load(std::memory_order_acquire));
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
  if (chunks <= kMaxChunks) return run_job(chunks, fn);
  for (int64_t first = 0; first < chunks; first += kMaxChunks) {  // more than a ticket can count
    const std::function<void(int64_t)> part = [&](int64_t c) { fn(first + c); };
    run_job(std::min(kMaxChunks, chunks - first), part);
  }
}

void ThreadPool::run_job(int64_t chunks, const std::function<void(int64_t)>& fn) {
  fn_ = &fn;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = (generation_of(ticket_.load()) + 1) & 0xffffffu;
  ticket_.store(static_cast<uint64_t>(generation) << 40 | static_cast<uint64_t>(chunks) << kCountBits,
                std::memory_order_release);
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
