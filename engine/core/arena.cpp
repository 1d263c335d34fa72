#include "core/arena.h"

#include <algorithm>

namespace octodiff {

size_t CachingArena::round_size(size_t bytes) {
  // 4 KiB granularity above 64 KiB so near-equal sizes share blocks; exact (64 B) below.
  size_t g = bytes > (64u << 10) ? 4096 : 64;
  return std::max<size_t>(g, (bytes + g - 1) / g * g);
}

CachingArena::~CachingArena() { trim(); }

void* CachingArena::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= 2 * size) {
      const size_t block = it->first;
      void* p = it->second;
      free_.erase(it);
      free_bytes_ -= block;
      live_[p] = block;
      in_use_ += block;
      peak_in_use_ = std::max(peak_in_use_, in_use_);
      return p;
    }
    if (free_bytes_ >= size) release_free_locked();
  }
  void* p = aligned_alloc_or_throw(size);
  std::lock_guard<std::mutex> lock(mutex_);
  live_[p] = size;
  reserved_ += size;
  in_use_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return p;
}

void CachingArena::deallocate(void* p, size_t /*bytes*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(p);
  const size_t block = it->second;
  live_.erase(it);
  in_use_ -= block;
  free_bytes_ += block;
  free_.emplace(block, p);
}

void CachingArena::release_free_locked() {
  for (auto& [size, p] : free_) {
    aligned_free(p);
    reserved_ -= size;
  }
  free_.clear();
  free_bytes_ = 0;
}

void CachingArena::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_free_locked();
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

size_t CachingArena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

}  // namespace octodiff
