// The safetensors reader against well-formed and hostile files: every rule of the format is
// enforced with a message naming the problem, and nothing crashes (run under ASan/UBSan too).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/half.h"
#include "io/safetensors.h"
#include "io/weight_source.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

fs::path write_raw(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::path p = dir / name;
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}

// A file with the given header text and `data_bytes` zero bytes of data.
fs::path with_header(const fs::path& dir, const std::string& name, const std::string& header,
                     size_t data_bytes) {
  return write_raw(dir, name, le64(header.size()) + header + std::string(data_bytes, '\0'));
}

// Expects open() to throw an octodiff::Error whose message contains `needle`.
void expect_rejected(const fs::path& p, const std::string& needle) {
  try {
    SafetensorsFile::open(p);
    ADD_FAILURE() << p << " was accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    std::printf("[rejected] %s -> %s\n", p.filename().c_str(), msg.c_str());
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
    EXPECT_NE(msg.find(p.string()), std::string::npos) << "message does not name the file: " << msg;
  }
}

}  // namespace

TEST(Safetensors, RoundTripsAndReadsGoldens) {
  auto dir = test::temp_dir("safetensors_roundtrip");
  Tensor a = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_vector({1}, {-7.5f});
  write_safetensors_f32(dir / "x.safetensors", {{"a", a}, {"b", b}}, {{"format", "pt"}});
  auto f = SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  Tensor a2 = f->to_f32("a");
  EXPECT_EQ(a2.shape(), (Shape{2, 3}));
  EXPECT_EQ(a2[5], 6.0f);
  EXPECT_EQ(f->to_f32("b")[0], -7.5f);

  auto tok = SafetensorsFile::open(test::tiny_sd_dir() / "goldens" / "tokenizer.safetensors");
  auto ids = tok->to_i64("input_ids");
  EXPECT_EQ(ids.size(), 15u * 77u);
  EXPECT_EQ(ids[77], 998);  // row 1 starts with <|startoftext|>
}

TEST(Safetensors, ConvertsHalfPrecision) {
  auto dir = test::temp_dir("safetensors_half");
  std::vector<TensorToWrite> list;
  list.push_back({"h", DType::F16, {2}, [](uint8_t* d, size_t) {
                    uint16_t v[2] = {0x3c00, 0xc000};  // 1, -2
                    std::memcpy(d, v, 4);
                  }});
  list.push_back({"bf", DType::BF16, {1}, [](uint8_t* d, size_t) {
                    uint16_t v = 0x4040;  // 3
                    std::memcpy(d, &v, 2);
                  }});
  write_safetensors(dir / "h.safetensors", list);
  auto f = SafetensorsFile::open(dir / "h.safetensors");
  Tensor h = f->to_f32("h");
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(f->to_f32("bf")[0], 3.0f);
}

TEST(Safetensors, ConvertsEveryHalfPrecisionValueExactly) {
  // All 65536 float16 bit patterns (NaNs, infinities, subnormals included), plus 3 more so that
  // the vector loop's tail runs: to_f32 gives exactly f16_to_f32's bits (core/half.h).
  auto dir = test::temp_dir("safetensors_half_all");
  constexpr int64_t kN = 65536 + 3;
  std::vector<TensorToWrite> list;
  list.push_back({"all", DType::F16, {kN}, [](uint8_t* d, size_t) {
                    for (int64_t i = 0; i < kN; ++i) {
                      const uint16_t v = static_cast<uint16_t>(i * 40503u);  // every pattern, shuffled
                      std::memcpy(d + 2 * i, &v, 2);
                    }
                  }});
  write_safetensors(dir / "all.safetensors", list);
  const Tensor t = SafetensorsFile::open(dir / "all.safetensors")->to_f32("all");
  int64_t bad = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const float want = f16_to_f32(static_cast<uint16_t>(i * 40503u));
    const float got = t[i];
    uint32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    bad += a != b;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Safetensors, RejectsHostileFiles) {
  auto dir = test::temp_dir("safetensors_hostile");
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

  expect_rejected(write_raw(dir, "empty.safetensors", ""), "too short");
  expect_rejected(write_raw(dir, "short.safetensors", "abc"), "too short");
  // Truncated: the data section is shorter than the tensors claim.
  expect_rejected(with_header(dir, "truncated.safetensors", ok, 5), "truncated");
  // Header length larger than the file.
  expect_rejected(write_raw(dir, "hdr_past_end.safetensors", le64(4096) + ok), "larger than the file");
  // Header length above the 100 MB limit.
  expect_rejected(write_raw(dir, "hdr_huge.safetensors", le64(200'000'000) + ok), "exceeds");
  expect_rejected(write_raw(dir, "hdr_max.safetensors", le64(~uint64_t{0}) + ok), "exceeds");
  // Not JSON / not an object / invalid UTF-8.
  expect_rejected(with_header(dir, "notjson.safetensors", "{this is not json}", 0), "JSON");
  expect_rejected(with_header(dir, "array.safetensors", "[1,2,3]", 0), "JSON object");
  expect_rejected(with_header(dir, "badutf8.safetensors", "{\"\xff\xfe\":1}", 0), "JSON");
  // Unknown dtype, missing fields, negative or fractional dims.
  expect_rejected(with_header(dir, "dtype.safetensors",
                              R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", 8),
                  "unknown dtype");
  expect_rejected(with_header(dir, "noshape.safetensors", R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8),
                  "no shape");
  expect_rejected(with_header(dir, "negdim.safetensors",
                              R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                  "negative");
  // Shape/dtype disagreeing with the byte range.
  expect_rejected(with_header(dir, "mismatch.safetensors",
                              R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8),
                  "span 8 bytes");
  // Overflowing shapes.
  expect_rejected(with_header(dir, "overflow.safetensors",
                              R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})",
                              8),
                  "overflow");
  // Overlapping ranges, gaps, leftover bytes, reversed offsets, duplicates.
  expect_rejected(with_header(dir, "overlap.safetensors",
                              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                  "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12),
                  "overlaps");
  expect_rejected(with_header(dir, "gap.safetensors",
                              R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                  "b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                              12),
                  "gap");
  expect_rejected(with_header(dir, "leftover.safetensors", ok, 16), "belong to no tensor");
  expect_rejected(with_header(dir, "reversed.safetensors",
                              R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
                  "end before");
  expect_rejected(with_header(dir, "dup.safetensors",
                              R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                  "a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                              8),
                  "twice");
  expect_rejected(with_header(dir, "meta.safetensors", R"({"__metadata__":{"k":1}})", 0), "not a string");
  // Pickles are refused without being read as anything else.
  expect_rejected(write_raw(dir, "model.ckpt", "PK\x03\x04 whatever"), "pickle");
  expect_rejected(write_raw(dir, "pickle.safetensors", std::string("\x80\x02}q\x00.", 6)), "pickle");
}

TEST(Safetensors, MissingTensorAndWrongDTypeAreNamed) {
  auto dir = test::temp_dir("safetensors_missing");
  write_safetensors_f32(dir / "m.safetensors", {{"present", Tensor::zeros({1})}});
  auto f = SafetensorsFile::open(dir / "m.safetensors");
  try {
    f->get("absent.weight");
    ADD_FAILURE() << "missing tensor accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("absent.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("m.safetensors"), std::string::npos) << msg;
  }
  EXPECT_THROW(f->to_i64("present"), Error);
}

TEST(Safetensors, TruncatedCopiesOfARealFileAreRejected) {
  // Every prefix length of a real model file must be rejected cleanly, never crash.
  auto dir = test::temp_dir("safetensors_prefix");
  auto bytes = [&] {
    std::ifstream in(test::tiny_sd_dir() / "text_encoder" / "model.safetensors", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t len : {size_t{0}, size_t{7}, size_t{8}, size_t{100}, size_t{1000}, bytes.size() / 2, bytes.size() - 1}) {
    auto p = write_raw(dir, "cut_" + std::to_string(len) + ".safetensors", bytes.substr(0, len));
    EXPECT_THROW(SafetensorsFile::open(p), Error) << "prefix " << len;
  }
  // Flipping header bytes must never crash either.
  for (size_t i = 8; i < 200; i += 7) {
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ 0x5a);
    auto p = write_raw(dir, "flip.safetensors", b);
    try {
      SafetensorsFile::open(p);
    } catch (const Error&) {
    }
  }
}

TEST(Safetensors, HeaderLengthsThatLookLikeAPickleAreStillSafetensors) {
  // A header of 128 or 384 bytes starts the file with 0x80 0x00 / 0x80 0x01, a pickle's first two
  // bytes; the JSON at byte 8 tells them apart.
  auto dir = test::temp_dir("safetensors_pickle_lookalike");
  for (size_t header_len : {size_t{128}, size_t{384}}) {
    std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    header.resize(header_len, ' ');
    const fs::path p = write_raw(dir, "h" + std::to_string(header_len) + ".safetensors",
                                 le64(header.size()) + header + std::string("\0\0\x80\x3f", 4));
    auto f = SafetensorsFile::open(p);
    EXPECT_EQ(f->to_f32("x")[0], 1.0f) << "header of " << header_len << " bytes";
  }
  // A real pickle's opening is still named as one.
  expect_rejected(write_raw(dir, "p.safetensors", std::string("\x80\x02}q\x00(X\x05\x00\x00\x00", 12) + std::string(64, 'x')),
                  "pickle");
}

TEST(Safetensors, AFileCutShortAfterOpeningIsAClearError) {
  // float32 tensors are read with pread, not through the mapping: a file truncated while a model
  // loads gives an error naming it (through the mapping it would be a SIGBUS).
  auto dir = test::temp_dir("safetensors_cut_later");
  const fs::path p = dir / "w.safetensors";
  write_safetensors_f32(p, {{"first", Tensor::zeros({64, 64})}, {"second", Tensor::zeros({4096})}});
  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->to_f32("first").numel(), 64 * 64);
  fs::resize_file(p, fs::file_size(p) - 4096 * 4 + 8);
  try {
    f->to_f32("second");
    ADD_FAILURE() << "a tensor past the end of the file was read";
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("[cut after opening] %s\n", msg.c_str());
    EXPECT_NE(msg.find("ends early"), std::string::npos) << msg;
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  }
}

// The file mapped at `address` in this process (from /proc/self/maps), or "" when none is.
std::string mapped_path_of(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) != 2 || at < begin || at >= end) continue;
    const size_t slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "";
}

TEST(Safetensors, AFileCutShortAfterOpeningIsAClearErrorThroughTheMappingToo) {
  // float16 tensors are converted straight from the mapping, and packing reads float32 weights
  // where they lie (WeightSource::take_to_read): both check the pages first, so a file cut short
  // while a model loads is an error naming it, not a SIGBUS.
  auto dir = test::temp_dir("safetensors_cut_mapped");
  const fs::path p = dir / "w.safetensors";
  auto fill_f32 = [](float v) {
    return [v](uint8_t* dst, size_t n) {
      for (size_t i = 0; i < n; i += 4) std::memcpy(dst + i, &v, 4);
    };
  };
  write_safetensors(p, {{"a", DType::F32, {64, 64}, fill_f32(1.5f)},
                        {"h", DType::F16, {8192}, [](uint8_t* dst, size_t n) { std::memset(dst, 0x3c, n); }},
                        {"b", DType::F32, {8192}, fill_f32(2.5f)}});
  auto f = SafetensorsFile::open(p);
  auto w = weights_from_safetensors({p}, "the test file");
  // Before the cut: read where it lies, with the same values take() gives.
  Tensor in_place = w->take_to_read("a", {64, 64});
  EXPECT_EQ(mapped_path_of(in_place.data()), p.string()) << "copied, not read in place";
  EXPECT_EQ(in_place[4095], 1.5f);
  in_place = Tensor();

  fs::resize_file(p, fs::file_size(p) - 40 * 1024);  // "b" and the second half of "h" are gone
  auto expect_cut = [&](const char* what, const std::function<void()>& read) {
    try {
      read();
      ADD_FAILURE() << what << ": read past the end of the file";
    } catch (const Error& e) {
      const std::string msg = e.what();
      std::printf("[cut after opening, %s] %s\n", what, msg.c_str());
      EXPECT_NE(msg.find("ends early"), std::string::npos) << msg;
      EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    }
  };
  expect_cut("float16", [&] { f->to_f32("h"); });
  expect_cut("float32 in place", [&] { w->take_to_read("b", {8192}); });
}

TEST(Safetensors, TakeIntoConvertsStraightIntoTheCallersStorage) {
  // WeightSource::take_into (a kept tensor, e.g. the token embedding, written into weight
  // storage): the same floats as take(), for float32 and float16, with no temporary tensor; a
  // stored shape that needs a transform goes through take(); a wrong shape is refused.
  auto dir = test::temp_dir("safetensors_take_into");
  const fs::path p = dir / "w.safetensors";
  write_safetensors(p, {{"a",
                         DType::F32,
                         {3, 5},
                         [](uint8_t* dst, size_t n) {
                           for (size_t i = 0; i < n; i += 4) {
                             const float v = 0.25f * static_cast<float>(i / 4) - 1.0f;
                             std::memcpy(dst + i, &v, 4);
                           }
                         }},
                        {"h", DType::F16, {4, 4}, [](uint8_t* dst, size_t n) {
                           for (size_t i = 0; i < n; i += 2) {
                             const uint16_t v =
                                 static_cast<uint16_t>(0x3c00 + 0x40 * (i / 2));  // 1, 1.0625, ...
                             std::memcpy(dst + i, &v, 2);
                           }
                         }}});
  auto w = weights_from_safetensors({p}, "the test file");
  auto reference = weights_from_safetensors({p}, "the test file");
  std::vector<float> a(15, -99.0f), h(16, -99.0f);
  w->take_into("a", {3, 5}, a.data());
  w->take_into("h", {4, 4}, h.data());
  const Tensor ra = reference->take("a", {3, 5}), rh = reference->take("h", {4, 4});
  for (int i = 0; i < 15; ++i) EXPECT_EQ(a[i], ra[i]) << "a[" << i << "]";
  for (int i = 0; i < 16; ++i) EXPECT_EQ(h[i], rh[i]) << "h[" << i << "]";
  EXPECT_EQ(a[14], 2.5f);
  EXPECT_EQ(h[1], 1.0625f);

  // A transform (here: the stored 4×4 read as 2×8) goes through take().
  auto t = weights_from_safetensors({p}, "the test file");
  WeightSource::Entry e;
  e.file = SafetensorsFile::open(p);
  e.record = &e.file->get("h");
  e.shape = {2, 8};
  e.transform = [](const Tensor& x) { return x.reshaped({2, 8}); };
  e.origin = "h";
  WeightSource reshaped("the reshaped file");
  reshaped.add("h2", e);
  std::vector<float> h2(16, -99.0f);
  reshaped.take_into("h2", {2, 8}, h2.data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(h2[i], rh[i]) << "h2[" << i << "]";

  try {
    t->take_into("a", {5, 3}, a.data());
    ADD_FAILURE() << "a wrong shape was accepted";
  } catch (const Error& err) {
    std::printf("[take_into, wrong shape] %s\n", err.what());
    EXPECT_NE(std::string(err.what()).find("expected"), std::string::npos) << err.what();
  }
}
