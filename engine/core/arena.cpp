#include "core/arena.h"

#include <algorithm>
#include <iterator>

namespace octodiff {

size_t CachingArena::round_size(size_t bytes) {
  // Whole cache lines, so every block stays 64-byte aligned inside its slab.
  return std::max<size_t>(64, (bytes + 63) / 64 * 64);
}

CachingArena::~CachingArena() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [base, size] : slabs_) aligned_free(base);
}

void CachingArena::add_free_locked(char* p, size_t size) {
  free_by_address_.emplace(p, size);
  free_by_size_.emplace(size, p);
}

void CachingArena::remove_free_locked(char* p, size_t size) {
  free_by_address_.erase(p);
  free_by_size_.erase({size, p});
}

void* CachingArena::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto fit = free_by_size_.lower_bound({size, nullptr});
  char* p = nullptr;
  size_t range = 0;
  if (fit != free_by_size_.end()) {
    range = fit->first;
    p = fit->second;
    remove_free_locked(p, range);
  } else {
    // A new slab: large enough that the few sizes of a step share slabs (fragmentation stays
    // inside them), whole 2 MiB pages.
    range = std::max(kMinSlab, (size + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20));
    p = static_cast<char*>(aligned_alloc_or_throw(range));
    slabs_.emplace(p, range);
    ++system_allocations_;
    reserved_ += range;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  if (range > size) add_free_locked(p + size, range - size);
  live_[p] = size;
  in_use_ += size;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return p;
}

void CachingArena::deallocate(void* q, size_t /*bytes*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(q);
  char* p = static_cast<char*>(q);
  size_t size = it->second;
  live_.erase(it);
  in_use_ -= size;
  // Merge with the free neighbours in the same slab.
  const auto slab = std::prev(slabs_.upper_bound(p));
  char* const slab_end = slab->first + slab->second;
  if (p + size < slab_end) {
    auto next = free_by_address_.find(p + size);
    if (next != free_by_address_.end()) {
      const size_t next_size = next->second;
      remove_free_locked(p + size, next_size);
      size += next_size;
    }
  }
  if (p > slab->first) {
    auto prev = free_by_address_.lower_bound(p);
    if (prev != free_by_address_.begin()) {
      --prev;
      if (prev->first + prev->second == p) {
        char* prev_p = prev->first;
        const size_t prev_size = prev->second;
        remove_free_locked(prev_p, prev_size);
        p = prev_p;
        size += prev_size;
      }
    }
  }
  add_free_locked(p, size);
}

void CachingArena::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto s = slabs_.begin(); s != slabs_.end();) {
    auto whole = free_by_address_.find(s->first);
    if (whole != free_by_address_.end() && whole->second == s->second) {
      remove_free_locked(s->first, s->second);
      aligned_free(s->first);
      reserved_ -= s->second;
      s = slabs_.erase(s);
    } else {
      ++s;
    }
  }
}

size_t CachingArena::bytes_reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}

size_t CachingArena::peak_bytes_reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_reserved_;
}

size_t CachingArena::peak_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_in_use_;
}

size_t CachingArena::system_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return system_allocations_;
}

size_t CachingArena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

size_t bytes_reserved(const Arenas& arenas) {
  size_t bytes = 0;
  for (const auto& arena : arenas) bytes += arena->bytes_reserved();
  return bytes;
}

void trim(const Arenas& arenas) {
  for (const auto& arena : arenas) arena->trim();
}

}  // namespace octodiff
