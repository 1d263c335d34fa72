#include "core/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "core/error.h"

namespace octodiff {

size_t CachingArena::round_size(size_t bytes) {
  // Whole cache lines, so every block stays 64-byte aligned inside its slab.
  return std::max<size_t>(64, (bytes + 63) / 64 * 64);
}

namespace {

constexpr size_t kPage2M = size_t{2} << 20;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace

CachingArena::~CachingArena() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [base, size] : slabs_)
    if (base != region_) aligned_free(base);
  if (region_) ::munmap(region_, region_size_);
}

bool CachingArena::grow_locked(size_t size, char** p, size_t* range) {
  if (!region_tried_) {
    region_tried_ = true;
    // Address space only: a PROT_NONE mapping is not committed memory. Making a part writable
    // commits it, so the kernel's overcommit policy refuses an impossible size there as it would
    // a malloc (no MAP_NORESERVE). 64 GiB, or less where refused. It starts on a 2 MiB boundary
    // and asks for transparent huge pages, so that the slabs (whole 2 MiB pages) are mapped a huge
    // page at a time: the activations at the autoencoders' 512² levels are 64 MiB each, 16384
    // 4 KiB pages (Zen 4, bf16 TAESD decode: 213 → 206 ms, f32 257 → 241 ms, medians of 5).
    for (size_t reserve = size_t{64} << 30; reserve >= (size_t{1} << 30) && !region_; reserve /= 4) {
      void* q = ::mmap(nullptr, reserve + kPage2M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (q == MAP_FAILED) continue;
      char* const mapped = static_cast<char*>(q);
      region_ = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(mapped), kPage2M));
      region_size_ = reserve;
      if (region_ > mapped) ::munmap(mapped, static_cast<size_t>(region_ - mapped));
      ::munmap(region_ + reserve, static_cast<size_t>(mapped + kPage2M - region_));  // never empty
      ::madvise(region_, reserve, MADV_HUGEPAGE);
    }
  }
  if (!region_) return false;
  // The free range at the end of what is committed, if any, is extended rather than left behind.
  char* const end = region_ + committed_;
  size_t tail = 0;
  if (committed_ > 0) {
    auto last = free_by_address_.lower_bound(end);
    if (last != free_by_address_.begin() && (--last)->first + last->second == end) tail = last->second;
  }
  // As a slab would be: at least kMinSlab, whole 2 MiB pages.
  const size_t grow = std::max(kMinSlab, round_up(size - tail, kPage2M));
  if (grow > region_size_ - committed_) return false;
  if (::mprotect(end, grow, PROT_READ | PROT_WRITE) != 0)
    fail("out of memory: could not allocate ", size / (1024.0 * 1024.0), " MiB (", std::strerror(errno), ")");
  if (tail) remove_free_locked(end - tail, tail);
  committed_ += grow;
  slabs_[region_] = committed_;
  ++system_allocations_;
  reserved_ += grow;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  *p = end - tail;
  *range = tail + grow;
  return true;
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
  } else if (!grow_locked(size, &p, &range)) {
    // A new slab: large enough that the few sizes of a step share slabs (fragmentation stays
    // inside them), whole 2 MiB pages.
    range = std::max(kMinSlab, round_up(size, kPage2M));
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
  if (committed_ > 0) {  // the free end of the reserved range, from the 2 MiB page after its start
    char* const end = region_ + committed_;
    auto last = free_by_address_.lower_bound(end);
    if (last != free_by_address_.begin() && (--last)->first + last->second == end) {
      char* const start = last->first;
      const size_t keep = round_up(static_cast<size_t>(start - region_), kPage2M);
      if (keep < committed_) {
        const size_t size = last->second;
        remove_free_locked(start, size);
        ::madvise(region_ + keep, committed_ - keep, MADV_DONTNEED);
        ::mprotect(region_ + keep, committed_ - keep, PROT_NONE);
        reserved_ -= committed_ - keep;
        committed_ = keep;
        if (region_ + keep > start) add_free_locked(start, static_cast<size_t>(region_ + keep - start));
        if (committed_ > 0) slabs_[region_] = committed_;
        else slabs_.erase(region_);
      }
    }
  }
  for (auto s = slabs_.begin(); s != slabs_.end();) {
    if (s->first == region_) {
      ++s;
      continue;
    }
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
