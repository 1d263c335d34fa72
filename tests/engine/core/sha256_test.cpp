#include "core/sha256.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::string hex_of(const std::string& s) {
  return sha256_hex(s.data(), s.size());
}

// A deterministic byte pattern; the expected digests below were computed with Python's hashlib.
std::vector<uint8_t> pattern(size_t n, unsigned mul, unsigned add) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * mul + add);
  return v;
}

}  // namespace

// FIPS 180-4 / NIST CSRC example vectors for SHA-256.
TEST(Sha256, NistExamples) {
  EXPECT_EQ(hex_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      hex_of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmn"
             "opqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(hex_of(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundaries (55/56 bytes: length fits / spills into a second block).
TEST(Sha256, PaddingBoundaries) {
  const std::pair<size_t, const char*> cases[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
  };
  for (const auto& [n, expected] : cases) {
    const auto bytes = pattern(n, 7, 3);
    EXPECT_EQ(sha256_hex(bytes.data(), bytes.size()), expected) << n << " bytes";
  }
}

// Feeding the same bytes in pieces of any size gives the one-shot digest; digest() restarts.
TEST(Sha256, IncrementalMatchesOneShot) {
  const auto bytes = pattern(1000, 131, 17);
  for (size_t len : {0u, 1u, 63u, 64u, 65u, 200u, 1000u}) {
    const std::string one_shot = sha256_hex(bytes.data(), len);
    for (size_t piece : {1u, 3u, 55u, 64u, 100u}) {
      Sha256 hash;
      for (size_t at = 0; at < len; at += piece) hash.update(bytes.data() + at, std::min(piece, len - at));
      EXPECT_EQ(hash.hex_digest(), one_shot) << len << " bytes in pieces of " << piece;
    }
  }
  Sha256 hash;
  hash.update("xyz", 3);
  hash.digest();
  hash.update("abc", 3);
  EXPECT_EQ(hash.hex_digest(), hex_of("abc"));
}

TEST(Sha256, FilesAreStreamed) {
  const auto dir = test::temp_dir("sha256");
  // Larger than the 1 MiB read chunk and not a multiple of it.
  const auto bytes = pattern(3 * 1048576 + 12345, 131, 17);
  const auto path = dir / "blob.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_EQ(sha256_file_hex(path), "409ba8fe642c7a8f75b7396f218d573da840976a3df56c441c018c224d518ddc");
  const auto empty = dir / "empty.bin";
  std::ofstream(empty, std::ios::binary).close();
  EXPECT_EQ(sha256_file_hex(empty), hex_of(""));

  EXPECT_THROW(sha256_file_hex(dir / "missing.safetensors"), Error);
  EXPECT_THROW(sha256_file_hex(dir), Error);
  try {
    sha256_file_hex(dir / "missing.safetensors");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos) << e.what();
  }
}
