#include "io/png.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

Image8 noise(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  Image8 im{w, h, Bytes(static_cast<size_t>(w) * h * 3)};
  for (auto& v : im.rgb) v = static_cast<uint8_t>(rng());
  return im;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

Bytes file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const Bytes& b, size_t n) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(n));
}

// --- PNG chunk surgery (our own CRC-32, so the tests do not lean on zlib) ---

uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
void put_be32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

struct Chunk {
  std::string type;
  size_t at = 0;  // offset of the length field
  uint32_t length = 0;
  size_t data() const { return at + 8; }
  size_t crc() const { return at + 8 + length; }
};

std::vector<Chunk> chunks(const Bytes& png) {
  std::vector<Chunk> out;
  for (size_t at = 8; at + 12 <= png.size();) {
    Chunk c{std::string(reinterpret_cast<const char*>(&png[at + 4]), 4), at, be32(&png[at])};
    if (c.crc() + 4 > png.size()) break;
    out.push_back(c);
    at = c.crc() + 4;
  }
  return out;
}

void fix_crc(Bytes& png, const Chunk& c) {
  put_be32(&png[c.crc()], crc32(&png[c.at + 4], c.length + 4));
}

Bytes chunk(const std::string& type, const Bytes& data) {
  Bytes c(12 + data.size());
  put_be32(c.data(), static_cast<uint32_t>(data.size()));
  std::memcpy(&c[4], type.data(), 4);
  if (!data.empty()) std::memcpy(&c[8], data.data(), data.size());
  put_be32(&c[8 + data.size()], crc32(&c[4], data.size() + 4));
  return c;
}

// A PNG whose IHDR claims w × h (valid CRCs; the IDAT is a tiny valid zlib stream of nothing).
Bytes png_claiming(uint32_t w, uint32_t h) {
  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  Bytes ihdr(13, 0);
  put_be32(&ihdr[0], w);
  put_be32(&ihdr[4], h);
  ihdr[8] = 8;  // bit depth
  ihdr[9] = 2;  // RGB
  for (const Bytes& c : {chunk("IHDR", ihdr), chunk("IDAT", {0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01}),
                         chunk("IEND", {})})
    png.insert(png.end(), c.begin(), c.end());
  return png;
}

// --- writing test files with libpng directly (other colour types, tEXt/zTXt) ---

struct RawPng {
  uint32_t width = 0, height = 0;
  int color = PNG_COLOR_TYPE_RGB, depth = 8;
  bool interlaced = false;
  Bytes packed;  // rows as the file stores them (16-bit: big-endian)
  std::vector<png_color> palette;
  std::vector<png_text> text_before, text_after;  // text_after lands after IDAT
};

// setjmp frame without C++ objects (see engine/io/png.cpp for why).
bool write_raw_with_libpng(FILE* f, const RawPng* spec, png_bytepp rows) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, spec->width, spec->height, spec->depth, spec->color,
               spec->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec->palette.empty())
    png_set_PLTE(png, info, spec->palette.data(), static_cast<int>(spec->palette.size()));
  if (!spec->text_before.empty())
    png_set_text(png, info, spec->text_before.data(), static_cast<int>(spec->text_before.size()));
  png_write_info(png, info);
  png_write_image(png, rows);
  if (!spec->text_after.empty())
    png_set_text(png, info, spec->text_after.data(), static_cast<int>(spec->text_after.size()));
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

void write_raw(const fs::path& path, RawPng spec) {
  const size_t row = spec.packed.size() / spec.height;
  std::vector<png_bytep> rows(spec.height);
  for (uint32_t y = 0; y < spec.height; ++y) rows[y] = &spec.packed[y * row];
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const bool ok = write_raw_with_libpng(f, &spec, rows.data());
  std::fclose(f);
  ASSERT_TRUE(ok) << "libpng could not write the test file " << path;
}

png_text text_entry(int compression, const char* key, const char* text) {
  png_text t{};
  t.compression = compression;
  t.key = const_cast<char*>(key);
  t.text = const_cast<char*>(text);
  return t;
}

// Runs `body` in a forked child (for things that must not touch the test process: privileges,
// mount namespaces, resource limits). The child reports through a pipe; returns
// {exit code, message}: 0 = pass, 77 = skip, anything else = failure.
std::pair<int, std::string> in_child(const std::function<int(std::string*)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {1, "pipe failed"};
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string msg;
    int rc = 1;
    try {
      rc = body(&msg);
    } catch (const std::exception& e) {
      msg = std::string("unexpected exception: ") + e.what();
    }
    if (!msg.empty() && ::write(fds[1], msg.data(), msg.size()) < 0) rc = 1;
    ::_exit(rc);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status))
    return {2, msg + " (child died with signal " + std::to_string(WTERMSIG(status)) + ")"};
  return {WEXITSTATUS(status), msg};
}

// For a child: expects write_png to fail with `reason`, naming the path, leaving `dir` empty.
int expect_write_failure(const fs::path& dir, const Image8& img, const std::string& reason,
                         std::string* msg) {
  const fs::path target = dir / "out.png";
  try {
    write_png(target, img, {{"parameters", "x"}});
  } catch (const Error& e) {
    const std::string what = e.what();
    *msg = "error: " + what;
    if (what.find(target.string()) == std::string::npos) return *msg += " [does not name the path]", 1;
    if (what.find(reason) == std::string::npos) return *msg += " [expected '" + reason + "']", 1;
    if (!entries(dir).empty()) return *msg += " [left files behind: " + entries(dir)[0] + "]", 1;
    return 0;
  }
  *msg = "write_png succeeded where it had to fail";
  return 1;
}

}  // namespace

// ------------------------------------------------------------------------------------------------

TEST(Png, RoundTripPixelsAndText) {
  auto dir = test::temp_dir("png_roundtrip");
  const Image8 img = noise(37, 23, 1);
  nlohmann::json big;
  for (int i = 0; i < 200; ++i)
    big["key_" + std::to_string(i)] = {{"seed", i * 7919}, {"prompt", "a lighthouse at dusk"}};
  const std::string json = big.dump();
  ASSERT_GT(json.size(), 9000u);
  ASSERT_LT(json.size(), 14000u);
  const std::vector<PngText> text = {
      {"parameters", "a photo of an astronaut\nSteps: 50, Sampler: PNDM, CFG scale: 7.5, Seed: 0"},
      {"Comment", "日本語のプロンプト 🚀🌸 — naïve café"},
      {"multi line", "line 1\nline 2\r\nline 3\n\n\ttabbed"},
      {"octodiff", json},
      {"empty", ""},
      {"Café", "Latin-1 key"},
  };
  write_png(dir / "a.png", img, text);
  EXPECT_EQ(entries(dir), std::vector<std::string>{"a.png"});  // no temp file left

  std::vector<PngText> got_text;
  const Image8 got = read_png(dir / "a.png", &got_text);
  EXPECT_EQ(got.width, 37);
  EXPECT_EQ(got.height, 23);
  EXPECT_EQ(got.rgb, img.rgb);
  ASSERT_EQ(got_text.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_EQ(got_text[i].key, text[i].key);
    EXPECT_EQ(got_text[i].text, text[i].text) << text[i].key;
  }
  const auto only_text = read_png_text(dir / "a.png");
  ASSERT_EQ(only_text.size(), text.size());
  EXPECT_EQ(only_text[3].text, json);

  // The file: every entry is an uncompressed iTXt before IDAT; the key is Latin-1 on disk.
  const Bytes file = file_bytes(dir / "a.png");
  int itxt = 0, first_idat = -1, last_itxt = -1, index = 0;
  for (const Chunk& c : chunks(file)) {
    EXPECT_NE(c.type, "tEXt");
    EXPECT_NE(c.type, "zTXt");
    if (c.type == "iTXt") {
      ++itxt, last_itxt = index;
      const std::string body(reinterpret_cast<const char*>(&file[c.data()]), c.length);
      EXPECT_EQ(body[body.find('\0') + 1], 0) << "compression flag must be 0";
      if (body.rfind("Caf", 0) == 0) {
        EXPECT_EQ(body.substr(0, 5), std::string("Caf\xE9\0", 5));
      }
    }
    if (c.type == "IDAT" && first_idat < 0) first_idat = index;
    ++index;
  }
  EXPECT_EQ(itxt, 6);
  EXPECT_LT(last_itxt, first_idat);

  // encode/decode in memory give the same bytes and pixels.
  EXPECT_EQ(encode_png(img, text), file);
  std::vector<PngText> mem_text;
  EXPECT_EQ(decode_png(file.data(), file.size(), &mem_text).rgb, img.rgb);
  EXPECT_EQ(mem_text.size(), text.size());

  // Overwriting an existing file replaces it.
  write_png(dir / "a.png", noise(5, 4, 2), {});
  EXPECT_EQ(read_png(dir / "a.png").width, 5);
  EXPECT_TRUE(read_png_text(dir / "a.png").empty());
  EXPECT_EQ(entries(dir), std::vector<std::string>{"a.png"});
}

TEST(Png, ReadsTextAndZtxtWrittenByLibpng) {
  auto dir = test::temp_dir("png_text_chunks");
  RawPng spec;
  spec.width = 4;
  spec.height = 3;
  const Image8 img = noise(4, 3, 3);
  spec.packed = img.rgb;
  std::string long_text(5000, 'z');  // compresses well in zTXt
  spec.text_before = {text_entry(PNG_TEXT_COMPRESSION_NONE, "parameters", "plain tEXt, na\xEFve"),
                      text_entry(PNG_TEXT_COMPRESSION_zTXt, "Caf\xE9", long_text.c_str())};
  spec.text_after = {text_entry(PNG_TEXT_COMPRESSION_zTXt, "after", "written after IDAT")};
  write_raw(dir / "t.png", spec);
  std::vector<std::string> types;
  for (const Chunk& c : chunks(file_bytes(dir / "t.png"))) types.push_back(c.type);
  ASSERT_EQ(types, (std::vector<std::string>{"IHDR", "tEXt", "zTXt", "IDAT", "zTXt", "IEND"}));

  std::vector<PngText> text;
  const Image8 got = read_png(dir / "t.png", &text);
  EXPECT_EQ(got.rgb, img.rgb);
  ASSERT_EQ(text.size(), 3u);
  EXPECT_EQ(text[0].key, "parameters");
  EXPECT_EQ(text[0].text, "plain tEXt, naïve");  // Latin-1 in the file, UTF-8 for us
  EXPECT_EQ(text[1].key, "Café");
  EXPECT_EQ(text[1].text, long_text);
  EXPECT_EQ(text[2].key, "after");
  EXPECT_EQ(text[2].text, "written after IDAT");
  const auto only_text = read_png_text(dir / "t.png");
  ASSERT_EQ(only_text.size(), 3u);
  EXPECT_EQ(only_text[2].text, "written after IDAT");
}

TEST(Png, ConvertsOtherColourTypesToRgb8) {
  auto dir = test::temp_dir("png_colour_types");
  const uint32_t w = 5, h = 3;
  std::mt19937 rng(4);
  auto check = [&](const char* name, RawPng spec, const Bytes& expected_rgb) {
    spec.width = w;
    spec.height = h;
    write_raw(dir / name, spec);
    const Image8 got = read_png(dir / name);
    EXPECT_EQ(got.width, int(w)) << name;
    EXPECT_EQ(got.height, int(h)) << name;
    EXPECT_EQ(got.rgb, expected_rgb) << name;
  };
  Bytes expected(w * h * 3);
  {  // RGBA: alpha dropped
    RawPng s;
    s.color = PNG_COLOR_TYPE_RGBA;
    for (size_t i = 0; i < w * h; ++i) {
      const uint8_t px[4] = {uint8_t(rng()), uint8_t(rng()), uint8_t(rng()), uint8_t(rng())};
      s.packed.insert(s.packed.end(), px, px + 4);
      std::memcpy(&expected[i * 3], px, 3);
    }
    check("rgba.png", s, expected);
  }
  {  // gray and gray+alpha: replicated
    RawPng g, ga;
    g.color = PNG_COLOR_TYPE_GRAY;
    ga.color = PNG_COLOR_TYPE_GRAY_ALPHA;
    for (size_t i = 0; i < w * h; ++i) {
      const uint8_t v = uint8_t(rng());
      g.packed.push_back(v);
      ga.packed.insert(ga.packed.end(), {v, uint8_t(rng())});
      expected[i * 3] = expected[i * 3 + 1] = expected[i * 3 + 2] = v;
    }
    check("gray.png", g, expected);
    check("gray_alpha.png", ga, expected);
  }
  {  // 1-bit gray: 0 / 255
    RawPng s;
    s.color = PNG_COLOR_TYPE_GRAY;
    s.depth = 1;
    for (uint32_t y = 0; y < h; ++y) {
      const uint8_t bits = uint8_t(rng()) & 0xF8;  // 5 pixels in the top bits
      s.packed.push_back(bits);
      for (uint32_t x = 0; x < w; ++x)
        for (int ch = 0; ch < 3; ++ch) expected[(y * w + x) * 3 + ch] = (bits >> (7 - x)) & 1 ? 255 : 0;
    }
    check("gray1.png", s, expected);
  }
  {  // palette
    RawPng s;
    s.color = PNG_COLOR_TYPE_PALETTE;
    for (int i = 0; i < 7; ++i) s.palette.push_back({uint8_t(rng()), uint8_t(rng()), uint8_t(rng())});
    for (size_t i = 0; i < w * h; ++i) {
      const uint8_t idx = static_cast<uint8_t>(rng() % 7);
      s.packed.push_back(idx);
      expected[i * 3] = s.palette[idx].red;
      expected[i * 3 + 1] = s.palette[idx].green;
      expected[i * 3 + 2] = s.palette[idx].blue;
    }
    check("palette.png", s, expected);
  }
  {  // 16-bit RGB: rounded to 8 bits (v*257 + 100 -> v; truncation would give v+1 for v >= 156)
    RawPng s;
    s.depth = 16;
    for (size_t i = 0; i < w * h * 3; ++i) {
      const uint8_t v = static_cast<uint8_t>(i * 17);
      const uint32_t v16 = v * 257u + (v < 255 ? 100 : 0);
      s.packed.insert(s.packed.end(), {uint8_t(v16 >> 8), uint8_t(v16 & 0xFF)});
      expected[i] = v;
    }
    check("rgb16.png", s, expected);
  }
  {  // Adam7 interlaced RGB
    RawPng s;
    s.interlaced = true;
    for (size_t i = 0; i < w * h * 3; ++i) s.packed.push_back(expected[i] = uint8_t(rng()));
    check("interlaced.png", s, expected);
    EXPECT_TRUE(read_png_text(dir / "interlaced.png").empty());
  }
}

TEST(Png, WriteRejectsInvalidInputAndKeepsOldFile) {
  auto dir = test::temp_dir("png_invalid");
  const Image8 img = noise(3, 2, 5);
  write_png(dir / "old.png", img, {{"parameters", "old"}});
  const Bytes old = file_bytes(dir / "old.png");
  auto rejects = [&](const Image8& im, const std::vector<PngText>& text, const char* label) {
    try {
      write_png(dir / "old.png", im, text);
      ADD_FAILURE() << label << ": accepted";
    } catch (const Error& e) {
      std::printf("  %-28s -> %s\n", label, e.what());
      EXPECT_NE(std::string(e.what()).find((dir / "old.png").string()), std::string::npos) << label;
    }
    EXPECT_EQ(file_bytes(dir / "old.png"), old) << label;
    EXPECT_EQ(entries(dir), std::vector<std::string>{"old.png"}) << label;
  };
  rejects(Image8{0, 2, {}}, {}, "zero width");
  rejects(Image8{3, -1, {}}, {}, "negative height");
  Image8 short_rgb = img;
  short_rgb.rgb.pop_back();
  rejects(short_rgb, {}, "rgb size mismatch");
  rejects(Image8{40000, 1, Bytes(120000)}, {}, "side over the limit");
  rejects(img, {{"", "x"}}, "empty key");
  rejects(img, {{std::string(80, 'k'), "x"}}, "80-byte key");
  rejects(img, {{"tab\tkey", "x"}}, "control char in key");
  rejects(img, {{"rocket 🚀", "x"}}, "non-Latin-1 key");
  rejects(img, {{" lead", "x"}}, "leading space");
  rejects(img, {{"two  spaces", "x"}}, "double space");
  rejects(img, {{"k", "bad \xC3\x28 utf8"}}, "invalid UTF-8");
  rejects(img, {{"k", "overlong \xC0\xAF"}}, "overlong UTF-8");
  rejects(img, {{"k", "surrogate \xED\xA0\x80"}}, "UTF-8 surrogate");
  rejects(img, {{"k", "cut \xE6\x97"}}, "truncated UTF-8");
  rejects(img, {{"k", std::string("nul\0inside", 10)}}, "NUL in text");
  // The limits themselves are fine.
  EXPECT_NO_THROW(write_png(dir / "ok.png", img, {{std::string(79, 'k'), "\xF4\x8F\xBF\xBF"}}));
}

TEST(Png, WriteIntoMissingDirectoryFails) {
  auto dir = test::temp_dir("png_missing_dir");
  try {
    write_png(dir / "no" / "such" / "out.png", noise(4, 4, 6), {});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    std::printf("  %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find((dir / "no" / "such" / "out.png").string()), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos);
  }
  EXPECT_TRUE(entries(dir).empty());
}

TEST(Png, WriteIntoReadOnlyDirectoryFails) {
  auto dir = test::temp_dir("png_readonly");
  ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
  const bool writable_here = ::access(dir.c_str(), W_OK) == 0;
  // As root the directory stays writable, so the check runs in a child that drops to "nobody".
  auto [rc, msg] = in_child([&](std::string* m) {
    if (writable_here) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)
        return *m = "cannot drop root privileges to uid 65534 to make the directory read-only", 77;
      if (::access(dir.c_str(), X_OK) != 0)
        return *m = "uid 65534 cannot reach " + dir.string() + " (a parent is not searchable)", 77;
    }
    if (::access(dir.c_str(), W_OK) == 0) return *m = "the directory is writable even for uid 65534", 77;
    return expect_write_failure(dir, noise(4, 4, 7), "Permission denied", m);
  });
  ::chmod(dir.c_str(), 0755);
  std::printf("  %s%s\n", writable_here ? "(as uid 65534) " : "", msg.c_str());
  if (rc == 77) GTEST_SKIP() << msg;
  EXPECT_EQ(rc, 0) << msg;
}

TEST(Png, WriteToFullDiskFailsAndLeavesNothing) {
  // A 64 KiB tmpfs in a private mount namespace of a child process: the mount vanishes with it.
  auto dir = test::temp_dir("png_full_disk");
  auto [rc, msg] = in_child([&](std::string* m) {
    if (::unshare(CLONE_NEWNS) != 0 && ::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return *m = std::string("cannot create a private mount namespace: ") + std::strerror(errno), 77;
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return *m = std::string("cannot make mounts private: ") + std::strerror(errno), 77;
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0)
      return *m = std::string("cannot mount a tiny tmpfs: ") + std::strerror(errno), 77;
    return expect_write_failure(dir, noise(256, 256, 8), "No space left on device", m);  // ~196 KB
  });
  std::printf("  %s\n", msg.c_str());
  if (rc == 77) GTEST_SKIP() << msg;
  EXPECT_EQ(rc, 0) << msg;
  EXPECT_TRUE(entries(dir).empty());
}

TEST(Png, WriteOverFileSizeLimitFailsAndLeavesNothing) {
  // The same failure path through RLIMIT_FSIZE (EFBIG), which needs no privileges.
  auto dir = test::temp_dir("png_fsize");
  auto [rc, msg] = in_child([&](std::string* m) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{16384, 16384};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return *m = "setrlimit failed", 77;
    return expect_write_failure(dir, noise(128, 128, 9), "File too large", m);  // ~49 KB
  });
  std::printf("  %s\n", msg.c_str());
  if (rc == 77) GTEST_SKIP() << msg;
  EXPECT_EQ(rc, 0) << msg;
  EXPECT_TRUE(entries(dir).empty());
}

TEST(Png, TruncatedAtEveryLengthIsAnError) {
  auto dir = test::temp_dir("png_truncated");
  const Bytes png = encode_png(noise(16, 16, 10), {{"parameters", "some text"}});
  std::printf("  full PNG: %zu bytes\n", png.size());
  for (size_t n = 0; n < png.size(); ++n) {
    try {
      decode_png(png.data(), n);
      ADD_FAILURE() << "truncated to " << n << " bytes was accepted";
    } catch (const Error&) {
    }
  }
  for (size_t n : {size_t{0}, size_t{5}, size_t{8}, size_t{20}, size_t{33}, png.size() / 2, png.size() - 12,
                   png.size() - 1}) {
    const fs::path p = dir / ("cut" + std::to_string(n) + ".png");
    write_bytes(p, png, n);
    try {
      read_png(p);
      ADD_FAILURE() << n;
    } catch (const Error& e) {
      std::printf("  %4zu bytes: %s\n", n, e.what());
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos);
    }
    EXPECT_THROW(read_png_text(p), Error) << n;
  }
}

TEST(Png, CorruptionIsAnError) {
  const Bytes good = encode_png(noise(16, 16, 11), {{"parameters", "text"}});
  const auto cs = chunks(good);
  auto find = [&](const std::string& type) {
    for (const Chunk& c : cs)
      if (c.type == type) return c;
    throw std::runtime_error("no " + type);
  };
  auto expect_error = [&](const Bytes& png, const char* label) {
    try {
      decode_png(png.data(), png.size());
      ADD_FAILURE() << label << ": accepted";
    } catch (const Error& e) {
      std::printf("  %-24s -> %s\n", label, e.what());
    }
  };
  Bytes b = good;
  b[find("IHDR").crc()] ^= 0x01;
  expect_error(b, "IHDR CRC");
  b = good;
  b[find("IDAT").crc() + 2] ^= 0x40;
  expect_error(b, "IDAT CRC");
  b = good;
  b[find("IDAT").data() + find("IDAT").length / 2] ^= 0x55;
  fix_crc(b, find("IDAT"));
  expect_error(b, "IDAT data (CRC fixed)");
  b = good;
  b[find("IHDR").data() + 9] = 7;  // colour type 7 does not exist
  fix_crc(b, find("IHDR"));
  expect_error(b, "bad colour type");
  b = good;
  b[0] = 0x88;
  expect_error(b, "bad signature");
  // A damaged *ancillary* chunk is skipped (libpng's rule): the pixels still load, the entry
  // is gone.
  b = good;
  b[find("iTXt").crc()] ^= 0x01;
  std::vector<PngText> text;
  EXPECT_NO_THROW(decode_png(b.data(), b.size(), &text));
  EXPECT_TRUE(text.empty());
}

TEST(Png, GarbageAndMutationsNeverCrash) {
  std::mt19937 rng(12);
  const Bytes sig = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  for (int i = 0; i < 200; ++i) {
    Bytes junk(rng() % 2000);
    for (auto& v : junk) v = static_cast<uint8_t>(rng());
    if (i % 2) junk.insert(junk.begin(), sig.begin(), sig.end());
    EXPECT_THROW(decode_png(junk.data(), junk.size()), Error) << i;
  }
  // Byte mutations of a valid file with every CRC repaired, so they reach the decoders: each
  // must either decode to a sane image or be an octodiff::Error.
  const Bytes good = encode_png(noise(24, 16, 13), {{"parameters", "mutation target"}, {"k", "v"}});
  int decoded = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    Bytes b = good;
    for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k)
      b[8 + rng() % (b.size() - 8)] ^= uint8_t(1 + rng() % 255);
    for (const Chunk& c : chunks(b)) fix_crc(b, c);
    try {
      std::vector<PngText> text;
      const Image8 im = decode_png(b.data(), b.size(), &text);
      ASSERT_EQ(im.rgb.size(), size_t(im.width) * im.height * 3);
      ++decoded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  std::printf("  3000 mutated files: %d decoded, %d rejected with octodiff::Error\n", decoded, rejected);
  EXPECT_GT(rejected, 100);
}

TEST(Png, AbsurdChunkLengthDoesNotAllocate) {
  // A text chunk whose length field claims 1.8 GB, in a file of a few hundred bytes. libpng
  // only warns about the length and would then allocate and zero it; our allocator cap stops
  // that. Measured as the peak memory of a child process.
  Bytes png = encode_png(noise(8, 8, 14), {{"parameters", "x"}, {"k", "v"}});
  const auto cs = chunks(png);
  ASSERT_EQ(cs[2].type, "iTXt");
  put_be32(&png[cs[2].at], 0x6F000007u);
  auto [rc, msg] = in_child([&](std::string* m) {
    try {
      decode_png(png.data(), png.size());
      return *m = "accepted", 1;
    } catch (const Error& e) {
      *m = e.what();
    }
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    *m += " | peak RSS " + std::to_string(usage.ru_maxrss / 1024) + " MB";
    return usage.ru_maxrss < 256 * 1024 ? 0 : 1;
  });
  std::printf("  %s\n", msg.c_str());
  EXPECT_EQ(rc, 0) << msg;
}

TEST(Png, AbsurdDimensionsRefusedBeforeAllocating) {
  auto dir = test::temp_dir("png_huge");
  // Over the limits; inside them but far too big for the data that follows (16000x16000 would
  // be 768 MB to allocate); zero; beyond PNG's 2^31-1.
  for (auto [w, h] : {std::pair<uint32_t, uint32_t>{100000, 100000},
                      {30000, 30000},
                      {40000, 1},
                      {16000, 16000},
                      {0, 10},
                      {0x80000000u, 1}}) {
    const Bytes png = png_claiming(w, h);
    const fs::path p = dir / ("huge_" + std::to_string(w) + "x" + std::to_string(h) + ".png");
    write_bytes(p, png, png.size());
    try {
      read_png(p);
      ADD_FAILURE() << w << "x" << h << " accepted";
    } catch (const Error& e) {
      std::printf("  %ux%u -> %s\n", w, h, e.what());
    }
    EXPECT_THROW(read_png_text(p), Error);
  }
  // The helper's file is well-formed: a 1x1 header with that (empty) IDAT fails only for lack
  // of image data, which shows the refusals above are about the dimensions.
  const Bytes one = png_claiming(1, 1);
  try {
    decode_png(one.data(), one.size());
    ADD_FAILURE() << "1x1 without data accepted";
  } catch (const Error& e) {
    std::printf("  1x1, no data -> %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("image data"), std::string::npos) << e.what();
  }
}

TEST(Png, MaximallyCompressibleImageIsNotRefused) {
  // All black 2048x2048 (12.6 MB raw): the best case for deflate, so the closest a real file
  // gets to the "too short for its size" bound.
  const Image8 black{2048, 2048, Bytes(size_t{2048} * 2048 * 3, 0)};
  const Bytes png = encode_png(black, {});
  std::printf("  %zu bytes for %zu raw bytes (ratio %.0f:1; the bound is 1032:1)\n", png.size(),
              black.rgb.size() + 2048, double(black.rgb.size() + 2048) / double(png.size()));
  EXPECT_EQ(decode_png(png.data(), png.size()).rgb, black.rgb);
}

TEST(Png, ReadErrorsNameThePath) {
  auto dir = test::temp_dir("png_read_errors");
  for (const fs::path& p : {dir / "missing.png", dir}) {
    try {
      read_png(p);
      ADD_FAILURE() << p;
    } catch (const Error& e) {
      std::printf("  %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos);
    }
  }
  std::ofstream(dir / "text.png") << "this is not a PNG";
  try {
    read_png(dir / "text.png");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a PNG"), std::string::npos) << e.what();
  }
}
