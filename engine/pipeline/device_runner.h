// DeviceRunner: the one place a sharded run spreads work over its devices.
//
// A run has D devices and W workers (W ≤ D); device d runs on worker d % W, each worker with its
// own thread budget and activation arena, so devices side by side never share scratch memory.
// Every call to `for_each_device` is one phase of the pipeline (encode prompts, denoise,
// decode): it returns when every device has finished the phase, and rethrows the first real
// error of any device (which cancels the others) before a mere cancellation.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/device.h"

namespace octodiff {

class DeviceRunner {
 public:
  // `arenas`: one per worker (their number is the number of workers), owned by the plan.
  DeviceRunner(int devices, int threads_per_worker, const Arenas& arenas, const CancelToken* cancel);

  // Runs fn(d) for every device d, each on its worker with that worker's threads and arena.
  void for_each_device(const std::function<void(int device)>& fn);
  // Hands every arena's free blocks back to the system (between phases).
  void trim_arenas();
  size_t arena_bytes_reserved() const;  // what the arenas hold from the system now

 private:
  int devices_, threads_per_worker_;
  const Arenas& arenas_;
  CancelToken stop_;  // set when the user cancels or any device fails
};

}  // namespace octodiff
