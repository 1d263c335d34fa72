// Kernel blocking per core (kernels/tuning.h): which tuning each CPU gets, the
// OCTODIFF_KERNEL_TUNING syntax and its refusals, and that GEMM (f32, bf16), Winograd convolution
// and attention stay accurate and thread-invariant under very different blockings.
#include "kernels/tuning.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/half.h"
#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/conv2d.h"
#include "kernels/gemm.h"
#include "kernels/internal.h"
#include "kernels/isa.h"
#include "kernels/throughput_probe.h"

namespace octodiff::kernels::test {
namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

const CacheSizes kZen4Caches{32 * kKiB, 1 * kMiB, 32 * kMiB};

// ---- choose_kernel_tuning -------------------------------------------------------------------

TEST(KernelTuningChoice, Zen4GetsTodaysValuesExactly) {
  const KernelTuning t = choose_kernel_tuning({"AuthenticAMD", 25, 0x11}, kZen4Caches);
  EXPECT_EQ(t, KernelTuning{}) << describe(t);
  EXPECT_EQ(t.gemm_kc, 384);
  EXPECT_EQ(t.bf16_kc, 768);
  EXPECT_EQ(t.gemm_mc_micro_rows, 8);
  EXPECT_EQ(t.gemm_mc_micro_rows_narrow, 16);
  EXPECT_EQ(t.gemm_nc_panels, 32);
  EXPECT_EQ(t.gemm_stream_b_mib, 8);
  EXPECT_EQ(t.gemm_stream_panels, 8);
  EXPECT_EQ(t.avx512_mr, 14);
  EXPECT_EQ(t.avx512_bf16_mr, 14);
  EXPECT_EQ(t.winograd_micro_rows, 8);
  EXPECT_EQ(t.attention_key_tile, 256);
  EXPECT_EQ(t.attention_query_micro_rows, 4);
  // Family 25 is today's values whatever the OS says about the caches (a VM may say nothing).
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 25, 0x61}, CacheSizes{}), KernelTuning{});
}

TEST(KernelTuningChoice, CacheRuleGivesTodaysValuesOnZen4Caches) {
  // Any other CPU goes through the cache-budget rule, which must land on the measured values.
  EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, 0x6a}, kZen4Caches), KernelTuning{});
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 23, 0x31}, kZen4Caches), KernelTuning{});
}

TEST(KernelTuningChoice, SapphireAndEmeraldRapidsMultiplyBf16WithFma) {
  // VDPBF16PS issues at half the FMA rate there (measured on model 207): the bf16 kernels widen;
  // and the f32 GEMM prefetches B, Winograd blocks are 2 micro-rows, float32 attention of SD 1.5's
  // head dims holds its scores in columns (measured there too).
  for (int model : {143, 207}) {
    KernelTuning expected;
    expected.bf16_dot = 0;
    expected.gemm_prefetch_b = 2;
    expected.winograd_micro_rows = 2;
    expected.attention_columns = 1;
    EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, model}, kZen4Caches), expected) << model;
  }
  // Float32 attention in score columns: measured there only.
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 25, 0x11}, kZen4Caches).attention_columns, 0);
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 26, 0x44}, kZen4Caches).attention_columns, 0);
  EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, 173}, kZen4Caches).attention_columns, 0);
  // Not measured elsewhere: no B prefetching on Zen 4 (its tuning), Zen 5 or other Intel cores.
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 25, 0x11}, kZen4Caches).gemm_prefetch_b, 0);
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 26, 0x44}, kZen4Caches).gemm_prefetch_b, 0);
  EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, 173}, kZen4Caches).gemm_prefetch_b, 0);
  // Other Intel cores (Cooper Lake 85, Granite Rapids 173) are not measured: VDPBF16PS stays
  // unless the start-up probe finds it at most 0.75 of FMA's rate (below).
  EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, 85}, kZen4Caches).bf16_dot, 1);
  EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, 173}, kZen4Caches).bf16_dot, 1);
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 25, 0x11}, kZen4Caches).bf16_dot, 1);
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 26, 0x44}, kZen4Caches).bf16_dot, 1);
}

TEST(KernelTuningChoice, UnmeasuredCoresWidenBf16WhereTheProbeFindsVdpbf16psAtMostThreeQuartersOfFma) {
  // Cores no measurement settles: the start-up probe's ratio decides bf16_dot, and nothing else.
  for (const CpuIdentity& cpu : {CpuIdentity{"AuthenticAMD", 26, 0x44}, CpuIdentity{"GenuineIntel", 6, 173},
                                 CpuIdentity{"GenuineIntel", 6, 85}, CpuIdentity{"", 0, 0}}) {
    const KernelTuning unprobed = choose_kernel_tuning(cpu, kZen4Caches);
    EXPECT_EQ(unprobed.bf16_dot, 1) << cpu.vendor << " " << cpu.model;
    int calls = 0;
    auto probe = [&calls](double ratio) {
      return [&calls, ratio] {
        ++calls;
        return ratio;
      };
    };
    KernelTuning expected = unprobed;
    expected.bf16_dot = 0;
    // Emerald Rapids' rate and the line itself; just above it, the equal-FLOP rate, Zen 4's, and
    // no AVX-512 BF16 (0).
    EXPECT_EQ(choose_kernel_tuning(cpu, kZen4Caches, probe(0.47)), expected) << cpu.model;
    EXPECT_EQ(choose_kernel_tuning(cpu, kZen4Caches, probe(0.75)), expected) << cpu.model;
    expected.bf16_dot = 1;
    EXPECT_EQ(choose_kernel_tuning(cpu, kZen4Caches, probe(0.76)), expected) << cpu.model;
    EXPECT_EQ(choose_kernel_tuning(cpu, kZen4Caches, probe(1.0)), expected) << cpu.model;
    EXPECT_EQ(choose_kernel_tuning(cpu, kZen4Caches, probe(2.0)), expected) << cpu.model;
    EXPECT_EQ(choose_kernel_tuning(cpu, kZen4Caches, probe(0.0)), expected) << cpu.model;
    EXPECT_EQ(calls, 6) << cpu.model;
  }
  // The measured cores keep what was measured, and are not probed.
  int calls = 0;
  const std::function<double()> probe = [&calls] {
    ++calls;
    return 2.0;
  };
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 25, 0x11}, kZen4Caches, probe), KernelTuning{});
  EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, 207}, kZen4Caches, probe).bf16_dot, 0);
  EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, 143}, kZen4Caches, probe).bf16_dot, 0);
  EXPECT_EQ(calls, 0);
}

TEST(KernelTuningChoice, ThroughputProbeMeasuresThisCore) {
  const double ratio = measure_vdpbf16ps_over_fma();
  std::printf("[tuning] VDPBF16PS FLOP rate / FMA's on this core: %.3f (0: no AVX-512 BF16)\n", ratio);
  if (!has_avx512_bf16()) {
    EXPECT_EQ(ratio, 0.0);
    EXPECT_EQ(vdpbf16ps_throughput_loop(), nullptr);
    return;
  }
  // The cores measured so far give 0.44 (Emerald Rapids) to 2 (Zen 4); a probe that timed nothing
  // (or a loop dropped by the compiler) would give 0 or an absurd ratio.
  EXPECT_GT(ratio, 0.1);
  EXPECT_LT(ratio, 10.0);
  // Each loop reports the FLOPs it did: 12 chains of 16 lanes, 2 (FMA) or 4 (VDPBF16PS) a lane.
  float sink = 0;
  EXPECT_EQ(fma_throughput_loop(Isa::Avx512)(10, &sink), 10 * 12 * 16 * 2);
  EXPECT_EQ(vdpbf16ps_throughput_loop()(10, &sink), 10 * 12 * 16 * 4);
  EXPECT_GT(sink, 0.0f);
  // What the start-up choice probed, where choose_kernel_tuning asks for the probe on this core
  // (not on the cores measured).
  bool asked = false;
  choose_kernel_tuning(cpu_identity(), cache_sizes(), [&asked] {
    asked = true;
    return 0.0;
  });
  if (!asked) {
    EXPECT_EQ(probed_vdpbf16ps_over_fma(), 0.0);
  } else {
    EXPECT_GT(probed_vdpbf16ps_over_fma(), 0.1);
  }
}

TEST(KernelTuningChoice, Zen5IsDerivedFromItsCaches) {
  // 48 KiB L1D: the B slice of 1.5 × L1D is 576 k; the A block of 112 × 576 floats (252 KiB) is
  // within a quarter of the 1 MiB L2. bf16: twice that, capped at the A-block stride's 768.
  KernelTuning expected;
  expected.gemm_kc = 576;
  expected.bf16_kc = 768;
  const KernelTuning t = choose_kernel_tuning({"AuthenticAMD", 26, 0x44}, {48 * kKiB, 1 * kMiB, 32 * kMiB});
  EXPECT_EQ(t, expected) << describe(t);
  // Zen 5's documented caches are used even when the OS reports none.
  EXPECT_EQ(choose_kernel_tuning({"AuthenticAMD", 26, 0x44}, CacheSizes{}), expected);
}

TEST(KernelTuningChoice, OtherCpusDerivedWithinClamps) {
  // An Intel core with 48 KiB L1D and 2 MiB L2 (Sapphire Rapids): L1D binds (576), L2 would allow 1170.
  const KernelTuning intel = choose_kernel_tuning({"GenuineIntel", 6, 0x8f}, {48 * kKiB, 2 * kMiB, 105 * kMiB});
  EXPECT_EQ(intel.gemm_kc, 576) << describe(intel);
  EXPECT_EQ(intel.bf16_kc, 768);
  EXPECT_EQ(intel.bf16_dot, 0);
  EXPECT_NO_THROW(check_kernel_tuning(intel));

  // Unknown caches (0) read as Zen 4's.
  EXPECT_EQ(choose_kernel_tuning({"GenuineIntel", 6, 0x55}, CacheSizes{}), KernelTuning{});
  EXPECT_EQ(choose_kernel_tuning({"", 0, 0}, CacheSizes{}), KernelTuning{});

  // Absurdly large caches: clamped (L1D to 128 KiB → 1536, then the K chunk to 1024).
  const KernelTuning huge = choose_kernel_tuning({"GenuineIntel", 6, 1}, {int64_t{1} << 30, int64_t{1} << 40, 0});
  EXPECT_EQ(huge.gemm_kc, 1024) << describe(huge);
  EXPECT_EQ(huge.bf16_kc, 768);
  EXPECT_NO_THROW(check_kernel_tuning(huge));

  // Absurdly small ones: clamped (16 KiB L1D → 192, 256 KiB L2 → 146 → 128 in multiples of 32).
  const KernelTuning tiny = choose_kernel_tuning({"GenuineIntel", 6, 1}, {1024, 1024, 0});
  EXPECT_EQ(tiny.gemm_kc, 128) << describe(tiny);
  EXPECT_EQ(tiny.bf16_kc, 256);
  EXPECT_NO_THROW(check_kernel_tuning(tiny));
}

TEST(KernelTuningChoice, ThisMachine) {
  const CpuIdentity cpu = cpu_identity();
  const CacheSizes caches = cache_sizes();
  const KernelTuning t = choose_kernel_tuning(cpu, caches);
  std::printf("[tuning] %s family %d model %d, L1D %" PRId64 " KiB, L2 %" PRId64 " KiB, L3 %" PRId64 " KiB: %s\n",
              cpu.vendor.c_str(), cpu.family, cpu.model, caches.l1d / kKiB, caches.l2 / kKiB, caches.l3 / kKiB,
              describe(t).c_str());
  EXPECT_NO_THROW(check_kernel_tuning(t));
  if (cpu.vendor == "AuthenticAMD" && cpu.family == 25) {
    EXPECT_EQ(t, KernelTuning{});
  }
}

// ---- OCTODIFF_KERNEL_TUNING ---------------------------------------------------------------

std::string refusal(const std::string& spec) {
  try {
    apply_kernel_tuning_overrides(KernelTuning{}, spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(KernelTuningOverride, GoodStringIsApplied) {
  const KernelTuning t =
      apply_kernel_tuning_overrides(KernelTuning{}, " gemm_kc=512, bf16_kc=640 ,attention_key_tile=128,");
  KernelTuning expected;
  expected.gemm_kc = 512;
  expected.bf16_kc = 640;
  expected.attention_key_tile = 128;
  EXPECT_EQ(t, expected) << describe(t);
  EXPECT_EQ(apply_kernel_tuning_overrides(KernelTuning{}, ""), KernelTuning{});
  // describe() is itself a valid override that reproduces the tuning.
  EXPECT_EQ(apply_kernel_tuning_overrides(KernelTuning{}, describe(t)), t);
  EXPECT_EQ(describe(KernelTuning{}).rfind("gemm_kc=384,", 0), 0u) << describe(KernelTuning{});
}

TEST(KernelTuningOverride, BadFormsAreRefusedNamingKeyAndRange) {
  struct Bad {
    const char* spec;
    std::vector<std::string> says;
  };
  const Bad cases[] = {
      {"gemm_kcc=512", {"unknown key 'gemm_kcc'", "gemm_kc"}},
      {"gemm_kc=abc", {"gemm_kc='abc' is not a whole number", "16...4096"}},
      {"gemm_kc=12x", {"gemm_kc='12x' is not a whole number"}},
      {"gemm_kc=", {"gemm_kc='' is not a whole number"}},
      {"gemm_kc=1.5", {"not a whole number"}},
      {"gemm_kc", {"'gemm_kc' is not key=value"}},
      {"gemm_kc=-5", {"gemm_kc=-5 is out of range", "16...4096"}},
      {"gemm_kc=8", {"gemm_kc=8 is out of range"}},
      {"bf16_kc=1024", {"bf16_kc=1024 is out of range", "32...768", "even"}},
      {"bf16_kc=641", {"bf16_kc=641 is out of range", "even"}},
      {"attention_key_tile=100", {"attention_key_tile=100 is out of range", "a multiple of 32"}},
      {"avx512_mr=15", {"avx512_mr=15 is out of range", "1...14"}},
      {"gemm_kc=512,winograd_micro_rows=0", {"winograd_micro_rows=0 is out of range"}},
  };
  for (const Bad& b : cases) {
    const std::string message = refusal(b.spec);
    std::printf("[tuning] '%s' -> %s\n", b.spec, message.c_str());
    for (const std::string& part : b.says)
      EXPECT_NE(message.find(part), std::string::npos) << b.spec << " -> " << message << " (wanted: " << part << ")";
  }
}

TEST(KernelTuningOverride, ScopeChecksAndRestores) {
  const KernelTuning before = kernel_tuning();
  KernelTuning bad;
  bad.bf16_kc = 800;
  EXPECT_THROW(ScopedKernelTuning{bad}, Error);
  EXPECT_EQ(kernel_tuning(), before);
  KernelTuning small;
  small.gemm_kc = 64;
  {
    ScopedKernelTuning scope(small);
    EXPECT_EQ(kernel_tuning().gemm_kc, 64);
  }
  EXPECT_EQ(kernel_tuning(), before);
}

// ---- the kernels under different tunings ---------------------------------------------------

struct NamedTuning {
  std::string name;
  KernelTuning t;
};

// Today's, a very small blocking (many K chunks, narrow micro-kernels, one-micro-row blocks,
// streaming B from 1 MiB, small key tiles) and a large one.
std::vector<NamedTuning> tunings() {
  return {{"today", KernelTuning{}},
          {"small", apply_kernel_tuning_overrides(
                        KernelTuning{}, "gemm_kc=64,bf16_kc=96,gemm_mc_micro_rows=2,gemm_mc_micro_rows_narrow=3,"
                                        "gemm_nc_panels=2,gemm_stream_b_mib=1,gemm_stream_panels=2,avx512_mr=5,"
                                        "avx512_bf16_mr=7,winograd_micro_rows=1,attention_key_tile=64,"
                                        "attention_query_micro_rows=1,gemm_prefetch_b=1")},
          {"large", apply_kernel_tuning_overrides(
                        KernelTuning{}, "gemm_kc=1024,bf16_kc=512,gemm_mc_micro_rows=16,gemm_nc_panels=64,"
                                        "avx512_mr=9,avx512_bf16_mr=11,winograd_micro_rows=32,"
                                        "attention_key_tile=512,attention_query_micro_rows=8,gemm_prefetch_b=0")}};
}

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

// M × K · K × N with a bias; K spans several chunks at every tuning, and the weight (1.1 MB) is
// above the small tuning's streaming threshold.
constexpr int64_t kM = 150, kK = 700, kN = 400;

struct GemmData {
  std::vector<float> a = random_vec(kM * kK, 41), b = random_vec(kK * kN, 42), bias = random_vec(kN, 43);
};

std::vector<float> run_gemm(const GemmData& d, Precision precision) {
  const PackedMatrix p = pack_b(d.b.data(), kK, kN, /*transposed=*/false, precision);
  std::vector<float> c(kM * kN);
  Epilogue ep;
  ep.bias = d.bias.data();
  gemm(d.a.data(), kM, kK, p, c.data(), kN, ep);
  return c;
}

TEST(KernelTuningKernels, GemmF32AccurateAndThreadInvariant) {
  const GemmData d;
  const auto ref = reference_gemm(d.a, kK, d.b, kM, kN, kK, d.bias.data());
  for (const NamedTuning& nt : tunings()) {
    ScopedKernelTuning scope(nt.t);
    const std::vector<float> c = run_gemm(d, Precision::F32);
    const double err = rel_error(c.data(), ref);
    std::printf("[tuning %s] f32 GEMM %" PRId64 "x%" PRId64 "x%" PRId64 ": rel err %.3g\n", nt.name.c_str(), kM, kK,
                kN, err);
    EXPECT_LT(err, 1e-5) << nt.name;
    expect_thread_invariant("f32 GEMM, tuning " + nt.name, [&] { return run_gemm(d, Precision::F32); });
  }
}

TEST(KernelTuningKernels, GemmBf16AccurateAndThreadInvariant) {
  const GemmData d;
  const auto ref = reference_gemm(rounded(d.a), kK, rounded(d.b), kM, kN, kK, d.bias.data());
  for (const NamedTuning& nt : tunings()) {
    ScopedKernelTuning scope(nt.t);
    const std::vector<float> c = run_gemm(d, Precision::BF16);
    const double err = rel_error(c.data(), ref);  // vs bf16-rounded inputs, as bf16_test.cpp
    std::printf("[tuning %s] bf16 GEMM: rel err vs bf16 ref %.3g\n", nt.name.c_str(), err);
    EXPECT_LT(err, 2e-6) << nt.name;
    expect_thread_invariant("bf16 GEMM, tuning " + nt.name, [&] { return run_gemm(d, Precision::BF16); });
  }
}

// Row, column and micro-kernel blocking and B prefetching never change a bit (only K chunks and key
// tiles order sums).
TEST(KernelTuningKernels, RowAndColumnBlockingChangeNoBit) {
  const GemmData d;
  const std::vector<float> f32 = run_gemm(d, Precision::F32), bf16 = run_gemm(d, Precision::BF16);
  KernelTuning t = kernel_tuning();
  t.gemm_mc_micro_rows = 3;
  t.gemm_nc_panels = 5;
  t.avx512_mr = 6;
  t.avx512_bf16_mr = 9;
  t.gemm_stream_b_mib = 1;
  // Prefetching B (none, each slice ahead, or the next slice shared by the micro-rows): the same
  // loads and FMAs.
  for (int64_t prefetch : {0, 1, 2}) {
    t.gemm_prefetch_b = prefetch;
    ScopedKernelTuning scope(t);
    EXPECT_EQ(0, std::memcmp(f32.data(), run_gemm(d, Precision::F32).data(), f32.size() * sizeof(float))) << prefetch;
    EXPECT_EQ(0, std::memcmp(bf16.data(), run_gemm(d, Precision::BF16).data(), bf16.size() * sizeof(float)))
        << prefetch;
  }
}

// bf16 products by VDPBF16PS or by FMA on widened values: the same bits (here the GEMM; the
// convolutions and attention on every path in bf16_test.cpp), and kernel_bf16_dot() follows the
// key (it can only be on where the CPU has BF16).
TEST(KernelTuningKernels, Bf16DotOrWidenedFmaChangeNoBit) {
  const GemmData d;
  KernelTuning dot = kernel_tuning(), fma = kernel_tuning();
  dot.bf16_dot = 1;
  fma.bf16_dot = 0;
  std::vector<float> with_dot, with_fma;
  {
    ScopedKernelTuning scope(dot);
    EXPECT_EQ(kernel_bf16_dot(), has_avx512_bf16() && kernel_isa() == Isa::Avx512);
    with_dot = run_gemm(d, Precision::BF16);
  }
  {
    ScopedKernelTuning scope(fma);
    EXPECT_FALSE(kernel_bf16_dot());
    with_fma = run_gemm(d, Precision::BF16);
  }
  EXPECT_EQ(0, std::memcmp(with_dot.data(), with_fma.data(), with_dot.size() * sizeof(float)));
  std::printf("[bf16 products] this CPU %s VDPBF16PS; chosen: %s\n", has_avx512_bf16() ? "has" : "has no",
              kernel_tuning().bf16_dot ? "VDPBF16PS" : "FMA on widened values");
}

// 3×3 same convolution, odd size (partial tiles), Ci spanning two chunks at gemm_kc = 64.
constexpr int64_t kCN = 1, kCH = 9, kCW = 11, kCi = 96, kCo = 48;

struct ConvData {
  std::vector<float> x = random_vec(kCN * kCH * kCW * kCi, 51), w = random_vec(kCo * kCi * 9, 52),
                     bias = random_vec(kCo, 53);
};

std::vector<float> run_conv(const ConvData& d, ConvAlgorithm algorithm, Precision precision) {
  const Conv2dWeights cw = pack_conv2d(d.w.data(), d.bias.data(), kCo, kCi, 3, 3, precision, algorithm);
  std::vector<float> y(kCN * kCH * kCW * kCo);
  conv2d_nhwc(d.x.data(), kCN, kCH, kCW, cw, Conv2dGeometry::same(3), y.data());
  return y;
}

std::vector<float> run_winograd(const ConvData& d, Precision precision) {
  return run_conv(d, ConvAlgorithm::Winograd, precision);
}

TEST(KernelTuningKernels, WinogradAccurateAndThreadInvariant) {
  const ConvData d;
  const auto ref = reference_conv2d(d.x, d.w, kCN, kCH, kCW, kCi, kCo, 3, Conv2dGeometry::same(3), d.bias.data());
  for (const NamedTuning& nt : tunings()) {
    ScopedKernelTuning scope(nt.t);
    for (Precision p : {Precision::F32, Precision::BF16}) {
      const std::vector<float> y = run_winograd(d, p);
      const double err = rel_error(y.data(), ref);
      const bool bf16 = p == Precision::BF16;
      std::printf("[tuning %s] %s Winograd conv: rel err %.3g\n", nt.name.c_str(), bf16 ? "bf16" : "f32", err);
      EXPECT_LT(err, bf16 ? 2e-2 : 1e-5) << nt.name;  // the tolerances of winograd_test.cpp
      expect_thread_invariant("Winograd, tuning " + nt.name, [&] { return run_winograd(d, p); });
    }
  }
}

// Attention: several key tiles at 64, one partial; head_dim 40 (not a whole panel).
constexpr int64_t kAB = 1, kALq = 70, kALk = 300, kAH = 2, kAD = 40;

struct AttnData {
  std::vector<float> q = random_vec(kAB * kALq * kAH * kAD, 61, -2.0f, 2.0f),
                     k = random_vec(kAB * kALk * kAH * kAD, 62, -2.0f, 2.0f), v = random_vec(kAB * kALk * kAH * kAD, 63);
};

std::vector<double> reference_attention(const AttnData& d, float scale) {
  const int64_t C = kAH * kAD;
  std::vector<double> out(static_cast<size_t>(kALq * C)), p(kALk);
  for (int64_t h = 0; h < kAH; ++h)
    for (int64_t i = 0; i < kALq; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < kALk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < kAD; ++c) dot += static_cast<double>(d.q[i * C + h * kAD + c]) * d.k[j * C + h * kAD + c];
        mx = std::max(mx, p[j] = dot * scale);
      }
      for (int64_t j = 0; j < kALk; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t c = 0; c < kAD; ++c) {
        double o = 0;
        for (int64_t j = 0; j < kALk; ++j) o += p[j] * d.v[j * C + h * kAD + c];
        out[i * C + h * kAD + c] = o / sum;
      }
    }
  return out;
}

std::vector<float> run_attention(const AttnData& d, float scale, Precision precision) {
  AttentionShape s;
  s.batch = kAB;
  s.q_len = kALq;
  s.kv_len = kALk;
  s.heads = kAH;
  s.head_dim = kAD;
  std::vector<float> out(d.q.size(), NAN);
  attention(d.q.data(), d.k.data(), d.v.data(), out.data(), s, scale, false, precision);
  return out;
}

TEST(KernelTuningKernels, AttentionAccurateAndThreadInvariant) {
  const AttnData d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kAD));
  const auto ref = reference_attention(d, scale);
  for (const NamedTuning& nt : tunings()) {
    ScopedKernelTuning scope(nt.t);
    for (Precision p : {Precision::F32, Precision::BF16}) {
      const std::vector<float> out = run_attention(d, scale, p);
      const double err = rel_error(out.data(), ref);
      const bool bf16 = p == Precision::BF16;
      std::printf("[tuning %s] %s attention: rel err %.3g\n", nt.name.c_str(), bf16 ? "bf16" : "f32", err);
      EXPECT_LT(err, bf16 ? 2e-2 : 1e-5) << nt.name;  // attention_test / bf16_test (vs f32 inputs)
      expect_thread_invariant("attention, tuning " + nt.name, [&] { return run_attention(d, scale, p); });
    }
  }
}

// The named cases' results at each value of one tuning key, compared bit for bit with those at the
// first value.
using NamedCase = std::pair<const char*, std::function<std::vector<float>()>>;
void expect_same_bits(int64_t KernelTuning::*key, const char* key_name, std::initializer_list<int64_t> values,
                      const std::vector<NamedCase>& cases) {
  auto results = [&](int64_t value) {
    KernelTuning t = kernel_tuning();
    t.*key = value;
    ScopedKernelTuning scope(t);
    std::vector<std::vector<float>> r;
    for (const NamedCase& c : cases) r.push_back(c.second());
    return r;
  };
  const std::vector<std::vector<float>> first = results(*values.begin());
  for (auto v = values.begin() + 1; v != values.end(); ++v) {
    const std::vector<std::vector<float>> other = results(*v);
    for (size_t i = 0; i < cases.size(); ++i)
      EXPECT_EQ(0, std::memcmp(other[i].data(), first[i].data(), first[i].size() * sizeof(float)))
          << cases[i].first << ", " << key_name << "=" << *v;
  }
}

// A Winograd block's size (winograd_micro_rows: how many tiles a thread takes through the three
// stages at once) changes no bit: each tile's arithmetic is fixed by the tile alone. F(2×2) f32 and
// bf16, F(4×4) f32, at 8 micro-rows (Zen 4's), 2 (Sapphire/Emerald Rapids') and 1.
TEST(KernelTuningKernels, WinogradBlockSizeChangesNoBit) {
  const ConvData cd;
  expect_same_bits(&KernelTuning::winograd_micro_rows, "winograd_micro_rows", {8, 2, 1},
                   {{"Winograd F(2x2) f32", [&] { return run_conv(cd, ConvAlgorithm::Winograd, Precision::F32); }},
                    {"Winograd F(2x2) bf16", [&] { return run_conv(cd, ConvAlgorithm::Winograd, Precision::BF16); }},
                    {"Winograd F(4x4)", [&] { return run_conv(cd, ConvAlgorithm::Winograd4x4, Precision::F32); }}});
}

// The convolution into a 64-byte aligned output, as tensors are (non-temporal stores need it),
// copied out; with upsample, of the 2× upsampled input (conv2d_upsample2x_nhwc).
std::vector<float> run_conv_aligned(const ConvData& d, ConvAlgorithm algorithm, Precision precision,
                                    bool upsample = false) {
  const Conv2dWeights cw = pack_conv2d(d.w.data(), d.bias.data(), kCo, kCi, 3, 3, precision, algorithm);
  const int64_t n = kCN * kCH * kCW * kCo * (upsample ? 4 : 1);
  std::shared_ptr<float> y(static_cast<float*>(aligned_alloc_or_throw(n * sizeof(float))), aligned_free);
  if (upsample)
    conv2d_upsample2x_nhwc(d.x.data(), kCN, kCH, kCW, cw, y.get());
  else
    conv2d_nhwc(d.x.data(), kCN, kCH, kCW, cw, Conv2dGeometry::same(3), y.get());
  return std::vector<float>(y.get(), y.get() + n);
}

// Outputs above winograd_stream_kib written with non-temporal stores change no bit: F(2×2) f32 and
// bf16, F(4×4) and the upsampling F(3×3, 2×2), streamed at 1 KiB (their outputs are 19–76 KiB) and
// not at 0; winograd_streams_output says so, and never for an output that is not 64-byte aligned.
TEST(KernelTuningKernels, WinogradStreamedOutputChangesNoBit) {
  const ConvData cd;
  const int64_t bytes = kCN * kCH * kCW * kCo * static_cast<int64_t>(sizeof(float));
  std::shared_ptr<float> y(static_cast<float*>(aligned_alloc_or_throw(bytes)), aligned_free);
  for (int64_t kib : {0, 1, 1024}) {
    KernelTuning t = kernel_tuning();
    t.winograd_stream_kib = kib;
    ScopedKernelTuning scope(t);
    EXPECT_EQ(detail::winograd_streams_output(bytes, y.get()), kib == 1) << kib;
    EXPECT_FALSE(detail::winograd_streams_output(bytes, y.get() + 4)) << kib;
  }
  expect_same_bits(
      &KernelTuning::winograd_stream_kib, "winograd_stream_kib", {0, 1},
      {{"Winograd F(2x2) f32", [&] { return run_conv_aligned(cd, ConvAlgorithm::Winograd, Precision::F32); }},
       {"Winograd F(2x2) bf16",
        [&] { return run_conv_aligned(cd, ConvAlgorithm::Winograd, Precision::BF16); }},
       {"Winograd F(4x4)", [&] { return run_conv_aligned(cd, ConvAlgorithm::Winograd4x4, Precision::F32); }},
       {"upsampling F(3x3, 2x2) bf16",
        [&] { return run_conv_aligned(cd, ConvAlgorithm::WinogradUpsample2x, Precision::BF16, true); }}});
}

// The Winograd scratch by tile or by position (winograd_tilewise_channels: 96 input channels here,
// by tile at 512 and by position at 0) changes no bit: only where the transformed tiles and GEMM
// outputs are kept, not what is computed. F(2×2) f32, bf16 and bf16 with Split activations (the
// low halves beside the high ones), F(4×4), the upsampling F(3×3, 2×2) bf16.
TEST(KernelTuningKernels, WinogradScratchByTileOrPositionChangesNoBit) {
  const ConvData cd;
  expect_same_bits(
      &KernelTuning::winograd_tilewise_channels, "winograd_tilewise_channels", {512, 0, 96, 95},
      {{"Winograd F(2x2) f32", [&] { return run_conv(cd, ConvAlgorithm::Winograd, Precision::F32); }},
       {"Winograd F(2x2) bf16", [&] { return run_conv(cd, ConvAlgorithm::Winograd, Precision::BF16); }},
       {"Winograd F(2x2) bf16, Split activations",
        [&] {
          ScopedBf16Activations split(Bf16Activations::Split);
          return run_conv(cd, ConvAlgorithm::Winograd, Precision::BF16);
        }},
       {"Winograd F(4x4)", [&] { return run_conv(cd, ConvAlgorithm::Winograd4x4, Precision::F32); }},
       {"upsampling F(3x3, 2x2) bf16",
        [&] { return run_conv_aligned(cd, ConvAlgorithm::WinogradUpsample2x, Precision::BF16, true); }}});
}

// B prefetching (gemm_prefetch_b: each slice ahead, or the next slice shared by the micro-rows)
// adds prefetches, not arithmetic: every f32 path that uses the micro-kernel — GEMM (above),
// implicit-GEMM and Winograd F(2×2)/F(4×4) convolutions, attention — gives the same bits with
// either and without.
TEST(KernelTuningKernels, BPrefetchingChangesNoBit) {
  const ConvData cd;
  const AttnData ad;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kAD));
  expect_same_bits(&KernelTuning::gemm_prefetch_b, "gemm_prefetch_b", {0, 1, 2},
                   {{"direct conv", [&] { return run_conv(cd, ConvAlgorithm::Direct, Precision::F32); }},
                    {"Winograd F(2x2)", [&] { return run_conv(cd, ConvAlgorithm::Winograd, Precision::F32); }},
                    {"Winograd F(4x4)", [&] { return run_conv(cd, ConvAlgorithm::Winograd4x4, Precision::F32); }},
                    {"attention", [&] { return run_attention(ad, scale, Precision::F32); }}});
}

// bf16 products by VDPBF16PS or by FMA on widened values change no bit of the bf16 convolutions
// and attention either: the widened products are summed in VDPBF16PS's order, and attention's
// softmax follows the instruction set the CPU has, not how the products are made (a core with
// BF16 that widens, as Sapphire/Emerald Rapids do, rounds its probabilities as the dot path does).
// (Score columns, which only the widened products have, are kept off here: another summation.)
TEST(KernelTuningKernels, Bf16DotOrWidenedFmaChangeNoBitOfConvolutionsAndAttention) {
  const ConvData cd;
  const AttnData ad;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kAD));
  KernelTuning rows = kernel_tuning();
  rows.attention_columns = 0;
  ScopedKernelTuning scope(rows);
  expect_same_bits(
      &KernelTuning::bf16_dot, "bf16_dot", {1, 0},
      {{"direct conv bf16", [&] { return run_conv(cd, ConvAlgorithm::Direct, Precision::BF16); }},
       {"Winograd F(2x2) bf16", [&] { return run_conv(cd, ConvAlgorithm::Winograd, Precision::BF16); }},
       {"attention bf16", [&] { return run_attention(ad, scale, Precision::BF16); }}});
}

}  // namespace
}  // namespace octodiff::kernels::test
