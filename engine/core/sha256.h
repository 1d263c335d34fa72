// SHA-256 (FIPS 180-4): model hashes (A1111's "Model hash" is the first 10 hex digits of the
// file's SHA-256) and checksums of reference data. Files are streamed, never loaded whole.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace octodiff {

class Sha256 {
 public:
  Sha256();
  // Feeds bytes; may be called any number of times.
  void update(const void* data, size_t size);
  // The digest of everything fed so far. Finishes the hash: the object then starts over empty.
  std::array<uint8_t, 32> digest();
  // digest() as 64 lower-case hex digits.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  void reset();

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Lower-case hex digest of a buffer / of a whole file.
std::string sha256_hex(const void* data, size_t size);

// Streams the file in chunks; octodiff::Error naming the file if it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace octodiff
