// Model hashes as AUTOMATIC1111 writes them ("Model hash: 6ce0161689", the first 10 hex digits of
// the weights file's SHA-256), cached on disk by (path, size, mtime) because hashing a 4 GB
// checkpoint takes seconds.
#pragma once

#include <filesystem>
#include <string>

namespace octodiff {

// Full SHA-256 hex of the file, from the cache when path, size and mtime are unchanged.
std::string cached_file_sha256(const std::filesystem::path& file);

// Where the cache lives: $OCTODIFF_CACHE_DIR, else $XDG_CACHE_HOME/octodiff, else ~/.cache/octodiff.
std::filesystem::path octodiff_cache_dir();

}  // namespace octodiff
