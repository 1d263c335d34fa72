// Memory: where tensor storage comes from.
//
// By default every tensor is a 64-byte aligned heap block. A compiled plan installs an
// Allocator for the duration of a run (AllocatorScope) so that activations come from its arena;
// the code that creates tensors does not change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace octodiff {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;           // 64-byte aligned, never null
  virtual void deallocate(void* p, size_t bytes) = 0;
};

// Storage for n floats from the current thread's allocator (the heap unless a scope is active).
std::shared_ptr<const void> allocate_floats(int64_t n);

// 64-byte aligned heap block; throws octodiff::Error with the size when memory runs out.
void* aligned_alloc_or_throw(size_t bytes);
void aligned_free(void* p);

// Installs `a` as this thread's allocator until the scope ends (nesting restores the previous).
class AllocatorScope {
 public:
  explicit AllocatorScope(Allocator* a);
  ~AllocatorScope();
  AllocatorScope(const AllocatorScope&) = delete;
  AllocatorScope& operator=(const AllocatorScope&) = delete;

 private:
  Allocator* previous_;
};

// Peak resident set size of this process in bytes (from /proc/self/status VmHWM).
int64_t peak_rss_bytes();
int64_t current_rss_bytes();

}  // namespace octodiff
