#include "core/memory.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"

namespace octodiff {
namespace {

thread_local Allocator* t_allocator = nullptr;
thread_local WeightStorage* t_weight_storage = nullptr;

int64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size()));
  }
  return 0;
}

}  // namespace

void* aligned_alloc_or_throw(size_t bytes) {
  // Blocks of 1 MiB and more (activations, scratch) are mapped from the OS and unmapped when
  // freed. Left alone, glibc raises its mmap threshold to 32 MiB after the first large free and
  // keeps later "freed" activations on its heap, so memory an arena trims would stay resident.
  static const bool fixed_threshold = mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1;
  static_cast<void>(fixed_threshold);
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail("out of memory: could not allocate ", bytes / (1024.0 * 1024.0), " MiB");
  return p;
}

void aligned_free(void* p) { std::free(p); }

std::shared_ptr<const void> allocate_floats(int64_t n) {
  size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (Allocator* a = t_allocator) {
    void* p = a->allocate(bytes);
    return std::shared_ptr<const void>(p, [a, bytes](const void* q) {
      a->deallocate(const_cast<void*>(q), bytes);
    });
  }
  void* p = aligned_alloc_or_throw(bytes);
  return std::shared_ptr<const void>(p, [](const void* q) { aligned_free(const_cast<void*>(q)); });
}

AllocatorScope::AllocatorScope(Allocator* a) : previous_(t_allocator) { t_allocator = a; }
AllocatorScope::~AllocatorScope() { t_allocator = previous_; }

std::shared_ptr<void> allocate_weight_bytes(size_t bytes, const std::string& tag) {
  if (WeightStorage* s = t_weight_storage) return s->allocate(bytes, tag);
  void* p = aligned_alloc_or_throw(bytes);
  std::memset(p, 0, bytes);
  return std::shared_ptr<void>(p, [](void* q) { aligned_free(q); });
}

WeightStorageScope::WeightStorageScope(WeightStorage* s) : previous_(t_weight_storage) { t_weight_storage = s; }
WeightStorageScope::~WeightStorageScope() { t_weight_storage = previous_; }

int64_t peak_rss_bytes() { return status_kib("VmHWM") * 1024; }
int64_t current_rss_bytes() { return status_kib("VmRSS") * 1024; }

}  // namespace octodiff
