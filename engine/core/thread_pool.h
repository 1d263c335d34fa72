// ThreadPool: the workers behind parallel_for.
//
// Why not OpenMP's fork/join: its parallel regions end in a barrier that waits for every thread
// of the team, and libgomp spins while it waits. When the cores are shared (a browser, a build,
// two test processes) a descheduled team member stalls every region; measured on the tiny model
// with 2 threads on 2 busy cores: 6.8 s per UNet step with OpenMP, 0.2 s with 1 thread.
//
// Here the caller publishes a job of chunks and works on it itself; helpers take chunks while
// any are left. The caller waits only for chunks in progress, never for a helper that has not
// started, so a sleeping helper costs nothing. Which thread runs a chunk never changes what the
// chunk computes: results stay bit-identical for any thread count or timing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace octodiff {

class ThreadPool {
 public:
  // `threads` counts the caller: threads - 1 helper threads are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Calls fn(chunk) for every chunk in [0, chunks), on the caller and the helpers; returns when
  // all are done. The first exception thrown by fn is rethrown here (remaining chunks still run).
  // Not re-entrant: fn must not call run() on the same pool (parallel_for runs nested loops serially).
  void run(int64_t chunks, const std::function<void(int64_t)>& fn);

 private:
  void helper_loop();
  void run_job(int64_t chunks, const std::function<void(int64_t)>& fn);  // chunks ≤ kMaxChunks
  bool take_and_run_chunk(uint32_t generation);  // false when this generation has no chunks left

  // The ticket: generation (24 bits) | the job's chunk count (20 bits) | next chunk (20 bits).
  // The count travels with the index in one atomic, so a helper still holding the previous job's
  // exhausted ticket compares it with that job's count, never with the next job's (which the
  // caller writes before publishing it): it cannot take a chunk of a job not yet published.
  static constexpr int kCountBits = 20;
  static constexpr int64_t kMaxChunks = (int64_t{1} << kCountBits) - 1;

  std::vector<std::thread> helpers_;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint32_t> wake_{0};  // bumped to publish a job
  std::atomic<int64_t> done_{0};   // chunks finished in the current job
  std::atomic<bool> stop_{false};
  // Sleeping (after a short spin) uses a mutex and condition variables, not std::atomic::wait,
  // whose libstdc++ 12 implementation can lose wake-ups.
  std::mutex sleep_mutex_;
  std::condition_variable job_cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace octodiff
