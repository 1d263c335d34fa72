#include "pipeline/model_hash.h"

#include <cstdlib>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "io/files.h"

namespace octodiff {
namespace fs = std::filesystem;

fs::path octodiff_cache_dir() {
  if (const char* d = std::getenv("OCTODIFF_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "octodiff";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "octodiff";
  return fs::temp_directory_path() / "octodiff-cache";
}

std::string cached_file_sha256(const fs::path& file) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::error_code ec;
  const fs::path abs = fs::absolute(file, ec);
  const auto size = fs::file_size(file, ec);
  const auto mtime = fs::last_write_time(file, ec).time_since_epoch().count();
  const std::string key = abs.string() + "|" + std::to_string(size) + "|" + std::to_string(mtime);
  const fs::path cache = octodiff_cache_dir() / "hashes.json";

  nlohmann::json table = nlohmann::json::object();
  try {
    if (fs::exists(cache)) table = nlohmann::json::parse(read_text_file(cache));
    if (!table.is_object()) table = nlohmann::json::object();
    auto it = table.find(key);
    if (it != table.end() && it->is_string()) return it->get<std::string>();
  } catch (...) {
    table = nlohmann::json::object();  // a damaged cache is rebuilt, never an error
  }
  const std::string hex = sha256_file_hex(file);
  try {
    table[key] = hex;
    fs::create_directories(cache.parent_path());
    const std::string text = table.dump(1);
    write_file_atomic(cache, text.data(), text.size());
  } catch (...) {
    // A read-only home or full disk only costs us the cache.
  }
  return hex;
}

}  // namespace octodiff
