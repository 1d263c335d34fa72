// Flax msgpack reader (io/flax_msgpack.h): files written by tools/goldens/make_tiny_sd_flax.py
// (Python msgpack, Flax's format), by our writer, and hostile files built byte by byte here —
// truncations, wrong extension types, byte counts that do not match the shape, absurd sizes,
// deep nesting, duplicate keys — each a clear octodiff::Error naming the file and the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "core/error.h"
#include "io/files.h"
#include "io/flax_msgpack.h"
#include "io/weight_source.h"
#include "test_support.h"

using namespace octodiff;

namespace {

// msgpack, always in its 32/64-bit forms (valid msgpack; Flax's writer picks shorter ones).
struct Pack {
  std::string b;
  void be(uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) b += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  Pack& map(uint32_t n) { b += '\xdf'; be(n, 4); return *this; }
  Pack& array(uint32_t n) { b += '\xdd'; be(n, 4); return *this; }
  Pack& str(const std::string& s) { b += '\xdb'; be(s.size(), 4); b += s; return *this; }
  Pack& bin(const std::string& s) { b += '\xc6'; be(s.size(), 4); b += s; return *this; }
  Pack& uint(uint64_t v) { b += '\xcf'; be(v, 8); return *this; }
  Pack& boolean(bool v) { b += v ? '\xc3' : '\xc2'; return *this; }
  Pack& ext(int8_t type, const std::string& payload) {
    b += '\xc9';
    be(payload.size(), 4);
    b += static_cast<char>(type);
    b += payload;
    return *this;
  }
  Pack& raw(const std::string& s) { b += s; return *this; }
};

std::string float_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string ndarray(const std::vector<uint64_t>& shape, const std::string& dtype, const std::string& bytes) {
  Pack p;
  p.array(3).array(static_cast<uint32_t>(shape.size()));
  for (uint64_t d : shape) p.uint(d);
  return p.str(dtype).bin(bytes).b;
}

std::vector<TensorRecord> parse(const std::string& bytes, const std::string& what = "test.msgpack") {
  return parse_flax_msgpack(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what);
}

// Expects parsing to fail with a message holding every one of `parts`.
void expect_refused(const std::string& bytes, const std::vector<std::string>& parts) {
  try {
    parse(bytes);
    ADD_FAILURE() << "parsed without an error; expected: " << parts.front();
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("  refused: %s\n", msg.c_str());
    EXPECT_NE(msg.find("test.msgpack"), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// {"conv": {"kernel": f32 (1, 1, 2, 3), "bias": f32 (3)}}
std::string small_file() {
  std::vector<float> k(6), b{7, 8, 9};
  for (int i = 0; i < 6; ++i) k[i] = static_cast<float>(i);
  return Pack()
      .map(1).str("conv").map(2)
      .str("kernel").ext(1, ndarray({1, 1, 2, 3}, "float32", float_bytes(k)))
      .str("bias").ext(1, ndarray({3}, "float32", float_bytes(b)))
      .b;
}

}  // namespace

TEST(FlaxMsgpack, ParsesNestedMapsIntoPathsWithOffsetsInTheFile) {
  const std::string bytes = small_file();
  auto recs = parse(bytes);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].name, "conv/kernel");
  EXPECT_EQ(recs[0].shape, (Shape{1, 1, 2, 3}));
  EXPECT_EQ(recs[0].dtype, DType::F32);
  EXPECT_EQ(recs[1].name, "conv/bias");
  float bias[3];
  std::memcpy(bias, bytes.data() + recs[1].begin, 12);
  EXPECT_EQ(bias[2], 9.0f);
  EXPECT_EQ(recs[1].end - recs[1].begin, 12u);
}

TEST(FlaxMsgpack, AcceptsRawStringDataAndNumpyScalars) {
  // Writers without use_bin_type store the bytes as raw str; ext 3 is a numpy scalar (shape ()).
  const std::string payload = Pack().array(3).array(1).uint(2).str("float32").str(float_bytes({1, 2})).b;
  auto recs = parse(Pack().map(2).str("w").ext(1, payload).str("s").ext(3, ndarray({}, "float32", float_bytes({5}))).b);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].nbytes(), 8u);
  EXPECT_EQ(recs[1].shape, Shape{});
  expect_refused(Pack().map(1).str("s").ext(3, ndarray({2}, "float32", float_bytes({5, 6}))).b, {"'s'", "numpy scalar"});
}

TEST(FlaxMsgpack, ReadsTheToolsFilesUnderTorchNamesAndLayouts) {
  const auto dir = test::data_dir() / "tiny-sd-flax" / "f32";
  auto flax = weights_from_flax_msgpack(dir / "vae" / "diffusion_flax_model.msgpack", FlaxNaming::Diffusers, "vae");
  auto torch = weights_from_safetensors({test::tiny_sd_dir() / "vae" / "diffusion_pytorch_model.safetensors"}, "vae");
  auto torch_names = torch->names();
  EXPECT_EQ(flax->names(), torch_names);
  // A conv kernel (HWIO), the VAE attention's query (dense, renamed), a norm's scale: bit-identical.
  for (const std::string name : {"decoder.conv_in.weight", "decoder.mid_block.attentions.0.to_q.weight",
                                 "decoder.mid_block.attentions.0.to_out.0.weight", "encoder.conv_norm_out.weight"}) {
    const Shape shape = torch->shape_of(name);
    const Tensor a = flax->take(name, shape), b = torch->take(name, shape);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * 4), 0) << name;
  }
  auto te = weights_from_flax_msgpack(dir / "text_encoder" / "flax_model.msgpack", FlaxNaming::Transformers, "te");
  EXPECT_TRUE(te->has("text_model.embeddings.token_embedding.weight"));
  EXPECT_TRUE(te->has("text_model.encoder.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(te->has("text_model.final_layer_norm.weight"));
}

TEST(FlaxMsgpack, NameMappingFollowsDiffusersRulesBothWays) {
  struct Case {
    const char* flax;
    size_t ndim;
    FlaxNaming naming;
    bool vae;
    const char* torch;
    FlaxLayout layout;
  };
  const Case cases[] = {
      {"down_blocks_0/attentions_0/transformer_blocks_0/attn1/to_q/kernel", 2, FlaxNaming::Diffusers, false,
       "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight", FlaxLayout::DenseKernel},
      {"down_blocks_0/attentions_0/transformer_blocks_0/attn1/to_out_0/bias", 1, FlaxNaming::Diffusers, false,
       "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0.bias", FlaxLayout::AsIs},
      {"time_embedding/linear_1/kernel", 2, FlaxNaming::Diffusers, false, "time_embedding.linear_1.weight",
       FlaxLayout::DenseKernel},
      {"up_blocks_1/resnets_2/conv1/kernel", 4, FlaxNaming::Diffusers, false, "up_blocks.1.resnets.2.conv1.weight",
       FlaxLayout::ConvKernel},
      {"mid_block/resnets_0/norm1/scale", 1, FlaxNaming::Diffusers, false, "mid_block.resnets.0.norm1.weight",
       FlaxLayout::AsIs},
      {"down_blocks_0/attentions_0/transformer_blocks_0/ff/net_0/proj/kernel", 2, FlaxNaming::Diffusers, false,
       "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj.weight", FlaxLayout::DenseKernel},
      {"decoder/mid_block/attentions_0/proj_attn/kernel", 2, FlaxNaming::Diffusers, true,
       "decoder.mid_block.attentions.0.to_out.0.weight", FlaxLayout::DenseKernel},
      {"encoder/mid_block/attentions_0/key/bias", 1, FlaxNaming::Diffusers, true,
       "encoder.mid_block.attentions.0.to_k.bias", FlaxLayout::AsIs},
      {"text_model/encoder/layers/11/mlp/fc1/kernel", 2, FlaxNaming::Transformers, false,
       "text_model.encoder.layers.11.mlp.fc1.weight", FlaxLayout::DenseKernel},
      {"text_model/embeddings/token_embedding/embedding", 2, FlaxNaming::Transformers, false,
       "text_model.embeddings.token_embedding.weight", FlaxLayout::AsIs},
      {"text_model/final_layer_norm/scale", 1, FlaxNaming::Transformers, false, "text_model.final_layer_norm.weight",
       FlaxLayout::AsIs},
  };
  for (const Case& c : cases) {
    const TorchParameter t = torch_parameter_for_flax(c.flax, c.ndim, c.naming);
    EXPECT_EQ(t.name, c.torch) << c.flax;
    EXPECT_EQ(t.layout, c.layout) << c.flax;
    const TorchParameter back = flax_parameter_for_torch(c.torch, c.ndim, c.naming, c.vae);
    EXPECT_EQ(back.name, c.flax) << c.torch;
    EXPECT_EQ(back.layout, c.layout) << c.torch;
  }
  EXPECT_THROW(torch_parameter_for_flax("conv/kernel", 3, FlaxNaming::Diffusers), Error);
}

TEST(FlaxMsgpack, LayoutChangesAreExactTransposes) {
  Tensor hwio = Tensor::empty({3, 2, 4, 5});
  for (int64_t i = 0; i < hwio.numel(); ++i) hwio[i] = static_cast<float>(i);
  const Tensor oihw = flax_to_torch_layout(hwio, FlaxLayout::ConvKernel);
  ASSERT_EQ(oihw.shape(), (Shape{5, 4, 3, 2}));
  // oihw[o][i][h][w] == hwio[h][w][i][o] at o=4, i=1, h=2, w=1
  EXPECT_EQ(oihw[((4 * 4 + 1) * 3 + 2) * 2 + 1], hwio[((2 * 2 + 1) * 4 + 1) * 5 + 4]);
  const Tensor back = torch_to_flax_layout(oihw, FlaxLayout::ConvKernel);
  EXPECT_EQ(std::memcmp(back.data(), hwio.data(), static_cast<size_t>(hwio.numel()) * 4), 0);
  Tensor dense = Tensor::from_vector({2, 3}, {0, 1, 2, 3, 4, 5});
  const Tensor t = flax_to_torch_layout(dense, FlaxLayout::DenseKernel);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t[1], 3.0f);  // t[0][1] = dense[1][0]
}

TEST(FlaxMsgpack, WriterRoundTripsIncludingChunkedLeaves) {
  const auto dir = test::temp_dir("flax_writer");
  std::vector<float> big(1000), bf(7);
  for (int i = 0; i < 1000; ++i) big[i] = 0.5f * static_cast<float>(i);
  std::vector<TensorToWrite> list;
  list.push_back({"a/w", DType::F32, {10, 100}, [&](uint8_t* d, size_t n) { std::memcpy(d, big.data(), n); }});
  list.push_back({"a/b/c", DType::F32, {7}, [&](uint8_t* d, size_t n) { std::memcpy(d, bf.data(), n); }});
  // Chunks of 256 bytes: "a/w" (4000 bytes) becomes 16 chunks of 64 floats (the last of 40).
  write_flax_msgpack(dir / "x.msgpack", list, 256);
  auto f = open_flax_msgpack(dir / "x.msgpack");
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorRecord* w = f->find("a/w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (Shape{10, 100}));
  EXPECT_EQ(w->pieces.size(), 16u);
  const Tensor t = f->to_f32(*w);
  EXPECT_EQ(std::memcmp(t.data(), big.data(), 4000), 0);
  EXPECT_EQ(f->f32_in_place(*w), nullptr);  // chunks are not one run of bytes
  EXPECT_NE(f->find("a/b/c"), nullptr);
}

TEST(FlaxMsgpack, EveryTruncationIsAnErrorNamingTheFile) {
  const std::string bytes = small_file();
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      parse(bytes.substr(0, n));
      ADD_FAILURE() << "a file cut to " << n << " of " << bytes.size() << " bytes parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("test.msgpack"), std::string::npos) << e.what();
    }
  }
  expect_refused(bytes.substr(0, bytes.size() - 5), {"conv/bias", "truncated"});
  expect_refused(bytes + "\xc0", {"1 bytes follow the top-level map"});
}

TEST(FlaxMsgpack, RandomlyCorruptedFilesParseOrFailCleanly) {
  // 20000 files with 1-4 random bytes changed (fixed seed): each either parses, with every
  // tensor's bytes inside the file, or is an octodiff::Error — never a crash (run under
  // OCTODIFF_SANITIZE=address;undefined too).
  std::string base = small_file();
  base = Pack().map(2).str("m").raw(base).str("chunked").map(3).str("__msgpack_chunked_array__").boolean(true)
             .str("shape").map(1).str("0").uint(3).str("chunks").map(2)
             .str("0").ext(1, ndarray({2}, "bfloat16", std::string(4, '\1')))
             .str("1").ext(1, ndarray({1}, "bfloat16", std::string(2, '\2'))).b;
  ASSERT_EQ(parse(base).size(), 3u);
  std::mt19937 rng(1234);
  int parsed = 0, refused = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = base;
    const int changes = 1 + static_cast<int>(rng() % 4);
    for (int c = 0; c < changes; ++c) bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    try {
      for (const TensorRecord& t : parse(bytes)) {
        for (const TensorRecord& piece : t.pieces) ASSERT_LE(piece.end, bytes.size());
        ASSERT_LE(t.end, bytes.size());
      }
      ++parsed;
    } catch (const Error&) {
      ++refused;
    }
  }
  std::printf("  corrupted files: %d parsed, %d refused\n", parsed, refused);
  EXPECT_GT(refused, 0);
}

TEST(FlaxMsgpack, WrongExtensionTypesAreRefused) {
  const std::string payload = ndarray({2}, "float32", float_bytes({1, 2}));
  expect_refused(Pack().map(1).str("w").ext(7, payload).b, {"'w'", "extension type 7"});
  expect_refused(Pack().map(1).str("w").ext(2, payload).b, {"'w'", "complex"});
  expect_refused(Pack().map(1).str("w").ext(1, Pack().map(0).b).b, {"'w'", "[shape, dtype, bytes]"});
  expect_refused(Pack().map(1).str("w").ext(1, ndarray({2}, "complex64", float_bytes({1, 2}))).b,
                 {"'w'", "complex64"});
  expect_refused(Pack().map(1).str("w").ext(1, payload + "x").b, {"'w'", "after its array payload"});
}

TEST(FlaxMsgpack, ByteCountsMustMatchShapeTimesDtype) {
  expect_refused(Pack().map(1).str("k").ext(1, ndarray({2, 3}, "float32", std::string(20, '\0'))).b,
                 {"'k'", "float32 (2, 3) = 24 bytes but holds 20 bytes"});
  expect_refused(Pack().map(1).str("k").ext(1, ndarray({4}, "bfloat16", std::string(16, '\0'))).b,
                 {"'k'", "8 bytes but holds 16"});
}

TEST(FlaxMsgpack, AbsurdSizesAreRefusedWithoutAllocating) {
  // 2^60 elements in a few bytes; a shape whose product overflows 64 bits.
  expect_refused(Pack().map(1).str("k").ext(1, ndarray({1ull << 30, 1ull << 30}, "float32", "")).b,
                 {"'k'", "holds 0 bytes"});
  expect_refused(Pack().map(1).str("k").ext(1, ndarray({1ull << 62, 8}, "float32", "")).b, {"'k'", "overflows"});
  expect_refused(Pack().map(1).str("k").ext(1, ndarray({1ull << 63, 1}, "float32", "")).b, {"'k'", "overflows"});
  // Headers claiming 2^32 - 1 entries, strings or bytes the file does not hold.
  expect_refused(Pack().map(0xffffffffu).b, {"truncated"});
  expect_refused(Pack().map(1).str("k").map(0xffffffffu).str("a").b, {"'k/a'", "truncated"});
  expect_refused(Pack().map(1).raw("\xdb\xff\xff\xff\xff").b, {"truncated"});
  expect_refused(Pack().map(1).str("k").raw(std::string("\xc9\xff\xff\xff\xff\x01", 6)).b, {"'k'", "truncated"});
  expect_refused(Pack().map(1).str("k").ext(1, Pack().array(3).array(0xffffffffu).b).b, {"'k'"});
  expect_refused(Pack().map(1).str("k").ext(1, Pack().array(3).array(17).b).b, {"'k'"});
}

TEST(FlaxMsgpack, LongPathsRepeatedOverManyLeavesAreRefused) {
  // 31 keys of 1024 bytes, then 100000 one-byte leaves: 330 KB of file whose leaves' paths
  // would take 3 GB if each leaf kept its own copy.
  Pack p;
  for (int i = 0; i < 31; ++i) p.map(1).str(std::string(1024, static_cast<char>('a' + i % 26)));
  p.map(100000);
  for (int i = 0; i < 100000; ++i) p.str(std::to_string(i)).boolean(true);
  expect_refused(p.b, {"implausibly long"});
}

TEST(FlaxMsgpack, DeepNestingIsRefused) {
  Pack deep;
  for (int i = 0; i < 100000; ++i) deep.map(1).str("x");
  expect_refused(deep.b, {"deeper than 32 levels"});
  Pack ok;  // 31 maps around the array: within the limit
  for (int i = 0; i < 31; ++i) ok.map(1).str("x");
  ok.ext(1, ndarray({1}, "float32", float_bytes({1})));
  EXPECT_EQ(parse(ok.b).size(), 1u);
}

TEST(FlaxMsgpack, DuplicateKeysAndNonFlaxStructuresAreRefused) {
  const std::string leaf = Pack().ext(1, ndarray({1}, "float32", float_bytes({1}))).b;
  expect_refused(Pack().map(2).str("a").raw(leaf).str("a").raw(leaf).b, {"'a' appears twice"});
  expect_refused(Pack().map(1).str("m").map(2).str("b").raw(leaf).str("b").raw(leaf).b, {"'m/b' appears twice"});
  expect_refused(Pack().array(1).raw(leaf).b, {"top level", "array"});
  expect_refused(Pack().map(1).str("a").array(1).raw(leaf).b, {"'a'", "array"});
  expect_refused(Pack().map(1).str("n").uint(3).b, {"'n'", "integer, not an array"});
  expect_refused(Pack().map(1).str("s").str("text").b, {"'s'", "string, not an array"});
  expect_refused(Pack().map(1).uint(5).raw(leaf).b, {"as a key"});
  expect_refused(Pack().map(1).str("a/b").raw(leaf).b, {"'a/b'", "contains '/'"});
  expect_refused(Pack().uint(1).b, {"top level"});
  expect_refused("\xc1", {"malformed"});
}

TEST(FlaxMsgpack, ChunkedLeavesAreValidated) {
  auto chunked = [](const std::string& shape_and_chunks, int entries) {
    return Pack().map(1).str("w").map(static_cast<uint32_t>(entries)).str("__msgpack_chunked_array__").boolean(true)
        .raw(shape_and_chunks).b;
  };
  const std::string c0 = Pack().ext(1, ndarray({4}, "float32", float_bytes({1, 2, 3, 4}))).b;
  const std::string c1 = Pack().ext(1, ndarray({2}, "float32", float_bytes({5, 6}))).b;
  const std::string shape23 = Pack().str("shape").map(2).str("0").uint(2).str("1").uint(3).b;
  auto recs = parse(chunked(shape23 + Pack().str("chunks").map(2).str("0").raw(c0).str("1").raw(c1).b, 3));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].name, "w");
  EXPECT_EQ(recs[0].shape, (Shape{2, 3}));
  EXPECT_EQ(recs[0].pieces.size(), 2u);
  expect_refused(chunked(shape23 + Pack().str("chunks").map(1).str("0").raw(c0).b, 3), {"'w'", "4 elements"});
  expect_refused(chunked(shape23 + Pack().str("chunks").map(2).str("0").raw(c0).str("2").raw(c1).b, 3),
                 {"'w'", "chunks keys"});
  expect_refused(chunked(shape23 + Pack().str("chunks").map(1).str("0").raw(c0).str("extra").uint(1).b, 4),
                 {"'w'", "unexpected entry 'extra'"});
}

TEST(FlaxMsgpack, MissingAndUnknownTensorsAreErrorsNamingThem) {
  const auto dir = test::temp_dir("flax_missing");
  const std::string bytes = small_file();
  write_file_atomic(dir / "m.msgpack", bytes.data(), bytes.size());
  auto w = weights_from_flax_msgpack(dir / "m.msgpack", FlaxNaming::Diffusers, "'" + (dir / "m.msgpack").string() + "'");
  EXPECT_TRUE(w->has("conv.weight"));
  EXPECT_EQ(w->shape_of("conv.weight"), (Shape{3, 2, 1, 1}));  // HWIO (1, 1, 2, 3) → OIHW
  try {
    w->take("conv2.weight", {3});
    ADD_FAILURE() << "a missing tensor was taken";
  } catch (const Error& e) {
    std::printf("  missing: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("conv2.weight"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("m.msgpack"), std::string::npos);
  }
  w->take("conv.weight", {3, 2, 1, 1});
  try {
    w->finish();  // conv/bias was never taken
    ADD_FAILURE() << "an unexpected tensor was accepted";
  } catch (const Error& e) {
    std::printf("  unknown: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("'conv/bias'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("m.msgpack"), std::string::npos);
  }
}
