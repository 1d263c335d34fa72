// CachingArena: the activation memory of one device in a compiled plan.
//
// A denoising loop allocates the same sequence of tensor sizes at every step. The arena keeps
// every block a step frees and hands it out again — the smallest free block that fits, if it is
// at most twice the request — so after the first step almost no memory is requested from the
// system: no page faults, no allocator contention. When nothing fits and the free blocks add up
// to at least the request, they go back to the system first, so the footprint stays near the
// peak of simultaneously live activations instead of growing with every distinct size seen.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/memory.h"

namespace octodiff {

class CachingArena : public Allocator {
 public:
  CachingArena() = default;
  ~CachingArena() override;
  CachingArena(const CachingArena&) = delete;
  CachingArena& operator=(const CachingArena&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;

  void trim();                       // returns every free block to the system
  size_t bytes_reserved() const;     // held from the system (live + free)
  size_t peak_bytes_reserved() const;
  size_t bytes_in_use() const;
  size_t peak_bytes_in_use() const;  // what a perfect allocator would have needed

 private:
  static size_t round_size(size_t bytes);
  mutable std::mutex mutex_;
  void release_free_locked();
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> live_;  // block sizes of handed-out blocks
  size_t free_bytes_ = 0;
  size_t reserved_ = 0, peak_reserved_ = 0, in_use_ = 0, peak_in_use_ = 0;
};

}  // namespace octodiff
