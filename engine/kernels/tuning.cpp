#include "kernels/tuning.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "kernels/internal.h"
#include "kernels/throughput_probe.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace octodiff::kernels {
namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

// Zen 4's caches, on which today's values were measured, and Zen 5's (AMD's documentation:
// 48 KiB 12-way L1D, 1 MiB L2 per core).
constexpr CacheSizes kZen4Caches{32 * kKiB, 1 * kMiB, 0};
constexpr CacheSizes kZen5Caches{48 * kKiB, 1 * kMiB, 0};

// Rows of the AVX-512 row block the K chunk is budgeted for: 8 micro-rows of 14.
constexpr int64_t kBudgetRows = 8 * 14;

int64_t round_down(int64_t v, int64_t m) { return v / m * m; }

// The f32 K chunk by the budget gemm.cpp gives for 384 on Zen 4:
// - a panel's B slice (kc rows × 32 floats = 128 B per k) takes 1.5 × L1D (48 KiB of 32 KiB: it is
//   reread by each of the 8 micro-rows of a row block, the part beyond L1 streams from L2 behind
//   the prefetcher — measured 256…512 within noise on Zen 4);
// - the A block (112 rows × kc floats) takes at most a quarter of L2 (168 KiB of 1 MiB on Zen 4),
//   leaving the rest to the B slices of the column block and the C tiles.
// Unknown or absurd cache sizes are clamped to 16 KiB…128 KiB L1D and 256 KiB…4 MiB L2 (0 reads as
// Zen 4's), the result to 128…1024 in multiples of 32.
int64_t derived_gemm_kc(const CacheSizes& c) {
  const int64_t l1d = std::clamp<int64_t>(c.l1d > 0 ? c.l1d : kZen4Caches.l1d, 16 * kKiB, 128 * kKiB);
  const int64_t l2 = std::clamp<int64_t>(c.l2 > 0 ? c.l2 : kZen4Caches.l2, 256 * kKiB, 4 * kMiB);
  const int64_t bytes_per_k = detail::kPanel * int64_t{sizeof(float)};
  const int64_t by_l1 = l1d * 3 / 2 / bytes_per_k;
  const int64_t by_l2 = l2 / 4 / (kBudgetRows * int64_t{sizeof(float)});
  return std::clamp<int64_t>(round_down(std::min(by_l1, by_l2), 32), 128, 1024);
}

// The blocking derived from cache sizes. The bf16 chunk takes the bytes an f32 chunk of half
// its length does (gemm_bf16.cpp), up to what the A-block stride kBlockLdaBf16 holds; Winograd
// outputs larger than the L3 bypass the caches. The row, column, Winograd and attention blocks
// have no cache rule yet: today's values (the sweep, bench/tune_kernels.sh, is how a new core
// should set them).
KernelTuning derived_tuning(const CacheSizes& caches) {
  KernelTuning t;
  t.gemm_kc = derived_gemm_kc(caches);
  t.bf16_kc = std::min(2 * t.gemm_kc, detail::kBlockLdaBf16 - 32);
  if (caches.l3 > 0) t.winograd_stream_kib = caches.l3 / kKiB;
  return t;
}

static_assert(KernelTuning{}.bf16_kc + 32 <= detail::kBlockLdaBf16, "a bf16 A block's row fits its stride");

}  // namespace

KernelTuning choose_kernel_tuning(const CpuIdentity& cpu, const CacheSizes& caches,
                                  const std::function<double()>& vdpbf16ps_over_fma) {
  const bool amd = cpu.vendor == "AuthenticAMD";
  // Zen 3/4: exactly the values measured there (the rule below gives the same on Zen 4's caches).
  if (amd && cpu.family == 25) return KernelTuning{};
  const bool sapphire_or_emerald_rapids =
      cpu.vendor == "GenuineIntel" && cpu.family == 6 && (cpu.model == 143 || cpu.model == 207);
  // Zen 5: derived from its documented caches, not yet measured on a Zen 5. Its two 512-bit FMA
  // ports need 8 independent accumulators in flight; the 14 × 32 micro-kernel has 28, so the
  // register blocking stays.
  KernelTuning t = amd && cpu.family == 26 ? derived_tuning({kZen5Caches.l1d, kZen5Caches.l2, caches.l3})
                                           : derived_tuning(caches);
  // Cores not measured (Zen 5, Granite Rapids, whatever comes next): products on widened values
  // where the start-up probe finds VDPBF16PS's FLOP rate at most 0.75 of the FMA's. The products'
  // bits are the same either way, but a bf16 model's TAESD and VAE run in float32 where VDPBF16PS
  // is off (pipeline/model.cpp), so the choice must not flip from one start to the next. The FLOP
  // rates cores have are 0.5 (VDPBF16PS issued a quarter as often as FMA: Emerald Rapids measures
  // 0.47–0.50), 1 (half as often) and 2 (as often: Zen 4); the line at 0.75 is 50 % above the
  // first and 25 % below the second, where the probe's spread here was 6 %. At 1 VDPBF16PS stays
  // (the same FLOPs, no widening to pay for).
  if (!sapphire_or_emerald_rapids && vdpbf16ps_over_fma) {
    const double ratio = vdpbf16ps_over_fma();
    if (ratio > 0 && ratio <= 0.75) t.bf16_dot = 0;
  }
  // Intel Sapphire Rapids (model 143) and Emerald Rapids (207), measured on a 207 (2026-11-26,
  // bench/results "Intel Xeon, Emerald Rapids"): VDPBF16PS issues once per 2 cycles (85 GFLOP/s a
  // core against 172 for FMA), so the bf16 kernels multiply widened values with FMA instead: the
  // same bits, 1.45 × faster on the hot shapes (geometric mean), 1.3-1.6 × end to end.
  // There too, the f32 micro-kernel prefetches B (bench/results "B prefetched by the float32
  // micro-kernel", paired): text-encoder layers ×1.00–1.15, f32 GEMMs ×1.01–1.13, implicit-GEMM
  // convolutions up to ×1.21; end to end the f32 UNet's guided step 7.3–8.0 s → 6.7–7.1 s. Then
  // the micro-rows of a panel sharing the fetching of the next panel's slice (2) instead of each
  // fetching its own ahead (1), paired on whole networks (bench/results "The next B slice fetched
  // by the micro-rows"): the SD 2.x text encoder ×1.11–1.16, the f32 UNet ×1.06–1.07, the f32 VAE
  // decoder ×1.06.
  // With B prefetched, Winograd blocks of 2 micro-rows instead of 8: a block's transformed tiles
  // and GEMM outputs stay in L2 while the transformed weight streams from the large L3 (paired,
  // bench/results "Winograd blocks of 2 micro-rows"): the UNet's and VAE's Winograd shapes
  // ×1.03–1.32, TAESD ×1.05–1.10, whole networks ×1.00–1.05.
  // Attention in score columns for SD 1.5's level-1 head of 40 (kernels/attention.cpp; paired,
  // bench/results "Attention on Emerald Rapids"): 4096 keys × 40 f32 ×1.07–1.17, bf16 ×1.12–1.13.
  if (sapphire_or_emerald_rapids) {
    t.bf16_dot = 0;
    t.gemm_prefetch_b = 2;
    t.winograd_micro_rows = 2;
    t.attention_columns = 1;
  }
  return t;
}

const std::vector<TuningKey>& kernel_tuning_keys() {
  static const std::vector<TuningKey> keys = {
      {"gemm_kc", &KernelTuning::gemm_kc, 16, 4096, 1, "f32 GEMM K chunk"},
      {"gemm_mc_micro_rows", &KernelTuning::gemm_mc_micro_rows, 1, 64, 1,
       "GEMM row block, micro-rows (mr >= 8)"},
      {"gemm_mc_micro_rows_narrow", &KernelTuning::gemm_mc_micro_rows_narrow, 1, 64, 1,
       "GEMM row block, micro-rows (mr < 8)"},
      {"gemm_nc_panels", &KernelTuning::gemm_nc_panels, 1, 1024, 1, "GEMM column block, 32-column panels"},
      {"gemm_stream_b_mib", &KernelTuning::gemm_stream_b_mib, 1, 65536, 1,
       "weight size (MiB) above which B streams"},
      {"gemm_stream_panels", &KernelTuning::gemm_stream_panels, 1, 256, 1, "panels per streaming-B tile"},
      {"gemm_prefetch_b", &KernelTuning::gemm_prefetch_b, 0, 2, 1,
       "f32 micro-kernel prefetches B: no (0), its slice ahead (1), the next slice shared (2)"},
      {"avx512_mr", &KernelTuning::avx512_mr, 1, 14, 1, "rows of the f32 AVX-512 micro-kernel"},
      {"avx512_bf16_mr", &KernelTuning::avx512_bf16_mr, 1, 14, 1, "rows of the bf16 AVX-512 micro-kernel"},
      {"bf16_kc", &KernelTuning::bf16_kc, 32, detail::kBlockLdaBf16 - 32, 2, "bf16 GEMM K chunk"},
      {"winograd_micro_rows", &KernelTuning::winograd_micro_rows, 1, 256, 1,
       "Winograd block of tiles, micro-rows"},
      {"winograd_stream_kib", &KernelTuning::winograd_stream_kib, 0, int64_t{1} << 30, 1,
       "Winograd outputs above this size (KiB) bypass the caches (0: never)"},
      {"winograd_tilewise_channels", &KernelTuning::winograd_tilewise_channels, 0, 1 << 20, 1,
       "Winograd scratch by tile for at most this many input channels, else by position (0: never)"},
      {"attention_key_tile", &KernelTuning::attention_key_tile, 32, 4096, detail::kPanel,
       "attention key tile Bc"},
      {"attention_query_micro_rows", &KernelTuning::attention_query_micro_rows, 1, 64, 1,
       "attention query block Br, micro-rows"},
      {"attention_columns", &KernelTuning::attention_columns, 0, 1, 1,
       "attention scores in columns (1: the shapes where that paid) or rows (0)"},
      {"bf16_dot", &KernelTuning::bf16_dot, 0, 1, 1,
       "bf16 products by VDPBF16PS (1) or widened to f32 FMA (0)"},
  };
  return keys;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::string allowed(const TuningKey& k) {
  std::string r = cat(k.name, " (", k.what, ") takes ", k.min, "...", k.max);
  if (k.multiple_of == 2) r += ", even";
  if (k.multiple_of > 2) r += cat(", a multiple of ", k.multiple_of);
  return r;
}

const TuningKey& find_key(std::string_view name) {
  for (const TuningKey& k : kernel_tuning_keys())
    if (name == k.name) return k;
  std::string names;
  for (const TuningKey& k : kernel_tuning_keys()) names += cat(names.empty() ? "" : ", ", k.name);
  fail(cat("kernel tuning: unknown key '", name, "' (known: ", names, ")"));
}

void check_value(const TuningKey& key, int64_t v) {
  if (v < key.min || v > key.max || v % key.multiple_of != 0)
    fail(cat("kernel tuning: ", key.name, "=", v, " is out of range; ", allowed(key)));
}

void apply_one(KernelTuning& t, std::string_view item) {
  const size_t eq = item.find('=');
  if (eq == std::string_view::npos) fail(cat("kernel tuning: '", item, "' is not key=value"));
  const TuningKey& key = find_key(trim(item.substr(0, eq)));
  const std::string_view text = trim(item.substr(eq + 1));
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    fail(cat("kernel tuning: ", key.name, "='", text, "' is not a whole number; ", allowed(key)));
  check_value(key, v);
  t.*key.field = v;
}

}  // namespace

KernelTuning apply_kernel_tuning_overrides(KernelTuning base, const std::string& spec) {
  std::string_view rest = spec;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (!item.empty()) apply_one(base, item);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return base;
}

void check_kernel_tuning(const KernelTuning& t) {
  for (const TuningKey& k : kernel_tuning_keys()) check_value(k, t.*k.field);
}

std::string describe(const KernelTuning& t) {
  std::string s;
  for (const TuningKey& k : kernel_tuning_keys()) s += cat(s.empty() ? "" : ",", k.name, "=", t.*k.field);
  return s;
}

CpuIdentity cpu_identity() {
  CpuIdentity id;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return id;
  char vendor[13] = {};
  for (int i = 0; i < 4; ++i) {
    vendor[i] = static_cast<char>(b >> (8 * i));
    vendor[4 + i] = static_cast<char>(d >> (8 * i));
    vendor[8 + i] = static_cast<char>(c >> (8 * i));
  }
  id.vendor = vendor;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return id;
  const int base_family = static_cast<int>((a >> 8) & 0xF), base_model = static_cast<int>((a >> 4) & 0xF);
  const int ext_family = static_cast<int>((a >> 20) & 0xFF), ext_model = static_cast<int>((a >> 16) & 0xF);
  id.family = base_family == 0xF ? base_family + ext_family : base_family;
  id.model = base_family == 0x6 || base_family == 0xF ? (ext_model << 4) | base_model : base_model;
#endif
  return id;
}

namespace {

// "32K", "1024K", "32M" (sysfs cache sizes) in bytes; 0 if unreadable.
int64_t read_size(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s.empty()) return 0;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc()) return 0;
  const char unit = end < s.data() + s.size() ? *end : ' ';
  return unit == 'K' ? v * kKiB : unit == 'M' ? v * kMiB : unit == 'G' ? v * 1024 * kMiB : v;
}

std::string read_word(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  in >> s;
  return s;
}

int64_t sysconf_bytes(int name) {
  const long v = ::sysconf(name);
  return v > 0 ? v : 0;
}

}  // namespace

// sysfs first: it describes cpu0's own caches (glibc's sysconf L3 is the whole package's, or
// on some VMs a multiple of it); sysconf for what sysfs does not say.
CacheSizes cache_sizes() {
  CacheSizes c;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = cat("/sys/devices/system/cpu/cpu0/cache/index", i, "/");
    const std::string level = read_word(dir + "level"), type = read_word(dir + "type");
    if (level.empty()) continue;
    const int64_t size = read_size(dir + "size");
    if (level == "1" && type == "Data") c.l1d = size;
    if (level == "2" && type != "Instruction") c.l2 = size;
    if (level == "3" && type != "Instruction") c.l3 = size;
  }
#ifdef _SC_LEVEL1_DCACHE_SIZE
  if (c.l1d == 0) c.l1d = sysconf_bytes(_SC_LEVEL1_DCACHE_SIZE);
  if (c.l2 == 0) c.l2 = sysconf_bytes(_SC_LEVEL2_CACHE_SIZE);
  if (c.l3 == 0) c.l3 = sysconf_bytes(_SC_LEVEL3_CACHE_SIZE);
#endif
  return c;
}

namespace {

std::atomic<const KernelTuning*> g_scoped{nullptr};

double g_probed_vdpbf16ps_over_fma = 0;  // written once, before chosen_at_start_up() returns

const KernelTuning& chosen_at_start_up() {
  static const KernelTuning t = [] {
    KernelTuning chosen = choose_kernel_tuning(cpu_identity(), cache_sizes(), [] {
      return g_probed_vdpbf16ps_over_fma = measure_vdpbf16ps_over_fma();
    });
    const char* spec = std::getenv("OCTODIFF_KERNEL_TUNING");
    if (!spec) return chosen;
    try {
      return apply_kernel_tuning_overrides(chosen, spec);
    } catch (const Error& e) {
      fail(cat("OCTODIFF_KERNEL_TUNING=\"", spec, "\": ", e.what()));
    }
  }();
  return t;
}

}  // namespace

double probed_vdpbf16ps_over_fma() {
  chosen_at_start_up();
  return g_probed_vdpbf16ps_over_fma;
}

const KernelTuning& kernel_tuning() {
  if (const KernelTuning* scoped = g_scoped.load(std::memory_order_acquire)) return *scoped;
  return chosen_at_start_up();
}

ScopedKernelTuning::ScopedKernelTuning(const KernelTuning& t)
    : tuning_(t), previous_(g_scoped.load(std::memory_order_acquire)) {
  check_kernel_tuning(tuning_);
  g_scoped.store(&tuning_, std::memory_order_release);
}
ScopedKernelTuning::~ScopedKernelTuning() { g_scoped.store(previous_, std::memory_order_release); }

}  // namespace octodiff::kernels
