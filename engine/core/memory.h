// Memory: where tensor storage comes from.
//
// By default every tensor is a 64-byte aligned heap block. A compiled plan installs an
// Allocator for the duration of a run (AllocatorScope) so that activations come from its arena;
// the code that creates tensors does not change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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

// Where weights go while a model loads: the heap, unless a WeightStorageScope installs a store
// (a component's weight cache file, io/weight_cache.h). `tag` says what the blob holds, so that a
// store read back later can check it gives the loader what it asks for. A blob must be filled
// before the next one is allocated from the same store: the store may then make it read-only.
class WeightStorage {
 public:
  virtual ~WeightStorage() = default;
  virtual std::shared_ptr<void> allocate(size_t bytes, const std::string& tag) = 0;  // zeroed, 64-byte aligned
};

// `bytes` of weight storage, zeroed, from this thread's store (the heap unless a scope is active).
std::shared_ptr<void> allocate_weight_bytes(size_t bytes, const std::string& tag);

class WeightStorageScope {
 public:
  explicit WeightStorageScope(WeightStorage* s);
  ~WeightStorageScope();
  WeightStorageScope(const WeightStorageScope&) = delete;
  WeightStorageScope& operator=(const WeightStorageScope&) = delete;

 private:
  WeightStorage* previous_;
};

// Peak resident set size of this process in bytes (from /proc/self/status VmHWM).
int64_t peak_rss_bytes();
double physical_memory_bytes();  // the machine's RAM (sysconf)
int64_t current_rss_bytes();

}  // namespace octodiff
