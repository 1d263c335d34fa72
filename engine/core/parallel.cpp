#include "core/parallel.h"

#include <memory>

namespace octodiff {

ThreadPool& thread_pool_for(int threads) {
  thread_local std::unique_ptr<ThreadPool> pool;
  if (!pool || pool->threads() != threads) pool = std::make_unique<ThreadPool>(threads);
  return *pool;
}

}  // namespace octodiff
