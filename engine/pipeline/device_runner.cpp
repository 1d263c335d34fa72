#include "pipeline/device_runner.h"

#include <exception>
#include <thread>

#include "core/error.h"
#include "core/memory.h"

namespace octodiff {

DeviceRunner::DeviceRunner(int devices, int threads_per_worker, const Arenas& arenas, const CancelToken* cancel)
    : devices_(devices), threads_per_worker_(threads_per_worker), arenas_(arenas), stop_(cancel) {}

void DeviceRunner::for_each_device(const std::function<void(int)>& fn) {
  const int workers = static_cast<int>(arenas_.size());
  std::vector<std::exception_ptr> errors(workers);
  auto worker = [&](int wi) {
    DeviceScope worker_scope(DeviceContext{wi, threads_per_worker_, &stop_});
    AllocatorScope allocator_scope(arenas_[wi].get());
    try {
      for (int d = wi; d < devices_; d += workers) {
        check_cancelled();
        DeviceScope device_scope(DeviceContext{d, threads_per_worker_, &stop_});
        fn(d);
      }
    } catch (...) {
      errors[wi] = std::current_exception();
      stop_.cancel();
    }
  };
  if (workers == 1) {
    worker(0);
  } else {
    std::vector<std::thread> threads;
    for (int wi = 0; wi < workers; ++wi) threads.emplace_back(worker, wi);
    for (auto& t : threads) t.join();
  }
  // A real error outranks the cancellations it caused in other workers.
  std::exception_ptr first_cancel;
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Cancelled&) {
      if (!first_cancel) first_cancel = e;
    } catch (...) {
      throw;
    }
  }
  if (first_cancel) std::rethrow_exception(first_cancel);
}

void DeviceRunner::trim_arenas() { trim(arenas_); }

size_t DeviceRunner::arena_bytes_reserved() const { return bytes_reserved(arenas_); }

}  // namespace octodiff
