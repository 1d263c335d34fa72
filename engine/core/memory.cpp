#include "core/memory.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
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
  if (n < 0 || static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / sizeof(float))  // bytes would wrap
    fail("out of memory: could not allocate ", n, " floats");
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
  // Large blobs straight from the kernel, in 2 MiB pages where it can: they are born zero, and
  // the packer's threads fault them in a huge page at a time. From the heap they were zeroed by
  // one thread, 4 KiB page by page: a full-size float32 UNet took 6-10 s to load instead of 2-3.
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes >= kHuge) {
    const size_t mapped = (bytes + 4095) / 4096 * 4096;
    void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("out of memory: could not allocate ", bytes / (1024.0 * 1024.0), " MiB of weights");
    ::madvise(p, mapped, MADV_HUGEPAGE);
    return std::shared_ptr<void>(p, [mapped](void* q) { ::munmap(q, mapped); });
  }
  void* p = aligned_alloc_or_throw(bytes);
  std::memset(p, 0, bytes);
  return std::shared_ptr<void>(p, [](void* q) { aligned_free(q); });
}

WeightStorageScope::WeightStorageScope(WeightStorage* s) : previous_(t_weight_storage) { t_weight_storage = s; }
WeightStorageScope::~WeightStorageScope() { t_weight_storage = previous_; }

double physical_memory_bytes() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
}

int64_t peak_rss_bytes() { return status_kib("VmHWM") * 1024; }
int64_t current_rss_bytes() { return status_kib("VmRSS") * 1024; }

}  // namespace octodiff
