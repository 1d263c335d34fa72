#include "core/device.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "core/error.h"

namespace octodiff {
namespace {

thread_local std::optional<DeviceContext> t_device;

int env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  try {
    int n = std::stoi(v);
    return n > 0 ? n : 0;
  } catch (...) {
    return 0;
  }
}

}  // namespace

int hardware_threads() {
  static const int n = [] {
    if (int e = env_threads("OCTODIFF_THREADS")) return e;
    if (int e = env_threads("OMP_NUM_THREADS")) return e;
    unsigned h = std::thread::hardware_concurrency();
    return h ? static_cast<int>(h) : 1;
  }();
  return n;
}

const DeviceContext& current_device() {
  if (!t_device) {
    DeviceContext ctx;
    ctx.threads = hardware_threads();
    t_device = ctx;
  }
  return *t_device;
}

DeviceScope::DeviceScope(const DeviceContext& ctx)
    : previous_(t_device.value_or(DeviceContext{})), had_previous_(t_device.has_value()) {
  t_device = ctx;
  if (t_device->threads < 1) t_device->threads = 1;
}

DeviceScope::~DeviceScope() {
  if (had_previous_)
    t_device = previous_;
  else
    t_device.reset();
}

void check_cancelled() {
  const DeviceContext& d = current_device();
  if (d.cancel && d.cancel->cancelled()) throw Cancelled();
}

}  // namespace octodiff
