// CachingArena: the activation memory of one device in a compiled plan.
//
// A denoising loop allocates the same sequence of tensor sizes at every step. The arena takes
// memory from the system in large slabs and places blocks inside them best-fit (the smallest
// free range that holds the request, lowest address first), splitting ranges as it goes and
// merging neighbours again when blocks are freed. Between steps every activation is freed, the
// slabs coalesce back into whole free ranges, and the next step finds the same layout: after the
// first step no memory is requested from the system, so no page faults, and the footprint stays
// near the peak of simultaneously live activations (plus fragmentation) rather than the sum of
// every distinct size seen. trim() gives whole free slabs back (between phases).
//
// Slabs are carved one after another from one reserved address range (committed as the arena
// grows, so an impossible size is still a clear out-of-memory error): together they are one slab
// whose free ranges merge across what would have been slab boundaries, and a request that does
// not fit extends the free range at the end instead of taking a slab of its own. A decoder whose
// activation sizes grow stage by stage (a VAE: 32, 128, then 256 MB blocks) then reuses the memory
// it has touched instead of faulting in fresh slabs beside fragmented old ones. trim() hands back
// the free end of the range. Where the range cannot be reserved (a `ulimit -v`), each slab is its
// own allocation, as before.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

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

  void trim();                       // returns every slab with nothing live in it to the system
  size_t bytes_reserved() const;     // held from the system (live + free)
  size_t peak_bytes_reserved() const;
  size_t bytes_in_use() const;
  size_t peak_bytes_in_use() const;   // what a perfect allocator would have needed
  size_t system_allocations() const;  // slabs requested from the system so far (misses)

  static constexpr size_t kMinSlab = size_t{32} << 20;

 private:
  static size_t round_size(size_t bytes);
  void add_free_locked(char* p, size_t size);
  void remove_free_locked(char* p, size_t size);
  // Extends the reserved range by at least `size` bytes past its free end (merged with that end):
  // the free range that now holds `size`, or false where the range cannot grow.
  bool grow_locked(size_t size, char** p, size_t* range);

  mutable std::mutex mutex_;
  std::map<char*, size_t> slabs_;               // base -> size
  std::map<char*, size_t> free_by_address_;     // free ranges, never crossing a slab's end
  std::set<std::pair<size_t, char*>> free_by_size_;
  std::unordered_map<void*, size_t> live_;      // block sizes of handed-out blocks
  size_t reserved_ = 0, peak_reserved_ = 0, in_use_ = 0, peak_in_use_ = 0, system_allocations_ = 0;
  char* region_ = nullptr;   // the reserved address range (null: not reserved yet, or refused)
  size_t region_size_ = 0;   // its size
  size_t committed_ = 0;     // bytes from region_ usable (the slab slabs_[region_] when > 0)
  bool region_tried_ = false;
};

// A set of arenas (one per worker of a plan): what they hold from the system together, and
// trim() on each.
using Arenas = std::vector<std::unique_ptr<CachingArena>>;
size_t bytes_reserved(const Arenas& arenas);
void trim(const Arenas& arenas);

}  // namespace octodiff
