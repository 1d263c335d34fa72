#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "io/npy.h"
#include "test_support.h"

using namespace octodiff;

TEST(Npy, RoundTrip) {
  auto dir = test::temp_dir("npy");
  Tensor t = Tensor::empty({2, 1, 4, 3});
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = 0.25f * static_cast<float>(i) - 3;
  write_npy(dir / "t.npy", t);
  Tensor r = read_npy(dir / "t.npy");
  EXPECT_EQ(r.shape(), t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(r[i], t[i]);
  // The header is NumPy's: magic, version 1.0, 64-byte aligned.
  std::ifstream in(dir / "t.npy", std::ios::binary);
  std::string head(10, '\0');
  in.read(head.data(), 10);
  EXPECT_EQ(head.substr(1, 5), "NUMPY");
  int hlen = static_cast<unsigned char>(head[8]) | (static_cast<unsigned char>(head[9]) << 8);
  EXPECT_EQ((10 + hlen) % 64, 0);
}

TEST(Npy, RejectsBadFiles) {
  auto dir = test::temp_dir("npy_bad");
  std::ofstream(dir / "junk.npy") << "not numpy at all";
  EXPECT_THROW(read_npy(dir / "junk.npy"), Error);
  Tensor t = Tensor::zeros({4, 4});
  write_npy(dir / "full.npy", t);
  std::string bytes;
  {
    std::ifstream in(dir / "full.npy", std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::ofstream(dir / "cut.npy", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 5));
  EXPECT_THROW(read_npy(dir / "cut.npy"), Error);
  EXPECT_THROW(read_npy(dir / "missing.npy"), Error);
}
