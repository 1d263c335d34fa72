// CachingArena: the activation memory of one device in a compiled plan.
//
// A denoising loop allocates the same sequence of tensor sizes at every step. The arena keeps
// every block a step frees and hands it out again for the next request of that size, so after the
// first step no memory is requested from the system: no page faults, no allocator contention,
// and a footprint equal to the peak of simultaneously live activations (plus blocks of sizes no
// longer used, released by trim()).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

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
  std::multimap<size_t, void*> free_;
  size_t reserved_ = 0, peak_reserved_ = 0, in_use_ = 0, peak_in_use_ = 0;
};

}  // namespace octodiff
