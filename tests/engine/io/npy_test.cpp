#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
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

namespace {

// A version-1.0 .npy file with this header text and these data bytes.
std::filesystem::path npy_with_header(const std::filesystem::path& dir, const std::string& name,
                                      const std::string& header, const std::string& data = {}) {
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes += header + data;
  std::ofstream(dir / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return dir / name;
}

std::string error_of(const std::filesystem::path& path) {
  try {
    read_npy(path);
  } catch (const Error& e) {
    std::printf("[error] %s\n", e.what());
    return e.what();
  }
  return "no error";
}

}  // namespace

// Found reading the parser for the fuzz target: 2^31 × 2^31 float32 is 2^64 bytes, which wrapped to
// 0, passed the size check and had the copy loop write past a 64-byte block.
TEST(Npy, ShapeWhoseByteCountWrapsIsTruncatedNotAnOverflow) {
  auto dir = test::temp_dir("npy_wrap");
  const auto path = npy_with_header(dir, "wrap.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648, 2147483648), }\n",
                                    std::string(64, '\0'));
  const std::string e = error_of(path);
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("wrap.npy"), std::string::npos) << e;
}

// A dimension past int64 was std::out_of_range from std::stoll (not a clear error).
TEST(Npy, DimensionPastInt64IsAClearError) {
  auto dir = test::temp_dir("npy_huge_dim");
  const auto path = npy_with_header(dir, "huge.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n");
  const std::string e = error_of(path);
  EXPECT_NE(e.find("too large"), std::string::npos) << e;
}

// A large shape over a small file is refused before its memory is asked for.
TEST(Npy, LargeShapeOverSmallFileIsRefusedBeforeAllocating) {
  auto dir = test::temp_dir("npy_large");
  const auto path = npy_with_header(dir, "large.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000, 100), }\n",
                                    std::string(16, '\0'));
  const std::string e = error_of(path);
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

// A header longer than NumPy's own limit (10000 bytes) is refused; the value patterns are read
// without backtracking (a long quoted descr no longer recurses once per character).
TEST(Npy, OverlongHeaderIsRefusedAndLongValuesAreRead) {
  auto dir = test::temp_dir("npy_long_header");
  std::string v2("\x93NUMPY\x02\x00", 8);
  const std::string header = "{'descr': '" + std::string(200000, 'x') + "', 'shape': (1,), }\n";
  for (int i = 0; i < 4; ++i) v2.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  v2 += header + std::string(4, '\0');
  std::ofstream(dir / "long.npy", std::ios::binary).write(v2.data(), static_cast<std::streamsize>(v2.size()));
  EXPECT_NE(error_of(dir / "long.npy").find("header of"), std::string::npos);
  // Under the limit: a long descr is an unknown dtype, a clear error.
  const auto path = npy_with_header(dir, "long_descr.npy", "{'descr': '" + std::string(9000, 'x') + "', 'shape': (1,), }\n",
                                    std::string(4, '\0'));
  EXPECT_NE(error_of(path).find("holds dtype"), std::string::npos);
}

// The header's keys in any order, with spacing as NumPy or a hand-written file has them.
TEST(Npy, ReadsHeadersInAnyOrderAndSpacing) {
  auto dir = test::temp_dir("npy_order");
  std::string data(2 * 3 * 4, '\0');
  const float one = 1.0f;
  std::memcpy(data.data() + 4, &one, 4);
  const auto path = npy_with_header(dir, "order.npy", "{'shape':(2,3),'fortran_order' :  False, 'descr':'<f4'}\n", data);
  const Tensor t = read_npy(path);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t[1], 1.0f);
  const auto fortran = npy_with_header(dir, "fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", data);
  EXPECT_NE(error_of(fortran).find("Fortran"), std::string::npos);
}
