// Device: the worker a computation runs on — its thread budget and its cancel flag.
//
// In the sharded pipeline each device (one shard of the prompts) runs on its own worker with
// its own thread budget. Kernels ask `current_device()` how many threads they may use, and
// long computations call `check_cancelled()` between layers, so cancellation takes effect
// within one network call. This is the one place that decides threads.
#pragma once

#include <atomic>

namespace octodiff {

// A flag the UI sets and computations poll. A token may follow a parent: it reads as cancelled
// when either is (the pipeline uses this to stop every device when one of them fails).
class CancelToken {
 public:
  CancelToken() = default;
  explicit CancelToken(const CancelToken* parent) : parent_(parent) {}
  void cancel() { flag_.store(true, std::memory_order_relaxed); }
  void reset() { flag_.store(false, std::memory_order_relaxed); }
  bool cancelled() const {
    return flag_.load(std::memory_order_relaxed) || (parent_ && parent_->cancelled());
  }

 private:
  std::atomic<bool> flag_{false};
  const CancelToken* parent_ = nullptr;
};

struct DeviceContext {
  int index = 0;                       // device number within a sharded run
  int threads = 1;                     // intra-op threads this device may use
  const CancelToken* cancel = nullptr;
};

// Number of hardware threads (respects OMP_NUM_THREADS / OCTODIFF_THREADS when set).
int hardware_threads();

// This thread's device; by default device 0 with hardware_threads() threads.
const DeviceContext& current_device();

// Makes `ctx` this thread's device until the scope ends.
class DeviceScope {
 public:
  explicit DeviceScope(const DeviceContext& ctx);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  DeviceContext previous_;
  bool had_previous_;
};

// Throws octodiff::Cancelled if this thread's device has been cancelled.
void check_cancelled();

}  // namespace octodiff
