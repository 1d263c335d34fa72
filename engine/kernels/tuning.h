// Cache and register blocking of the compute kernels, chosen per core at start-up.
//
// The GEMM drivers (f32 and bf16), the Winograd convolution and flash attention read their
// blocking from kernel_tuning() instead of compile-time constants, so that one binary can block
// for the core it runs on: today's values (measured on Zen 4) on AMD family 25, values derived from
// the caches elsewhere. Blocking never depends on the thread count, so results stay bit-identical
// for any number of threads whatever the tuning; K chunks and the attention key tile do change
// the order of float32 sums, so two tunings may differ in the last bits (within the kernels'
// tolerances), while the row, column and micro-kernel blocking never change a bit.
//
// OCTODIFF_KERNEL_TUNING="gemm_kc=512,bf16_kc=640,..." overrides single values for sweeps
// (bench/tune_kernels.sh); kernel_tuning_keys() lists every key with its range.
//
// Not here, on purpose: layout constants every packed weight depends on (kPanel, kPairRow,
// kBlockLdaBf16: the bf16 micro-kernel's compile-time A stride, which caps bf16_kc at 768), the
// packing and conversion buffers (kPackRows, gemm_bf16.cpp's kChunk 256 and kBlock 128 — fixed-size
// stack tiles, not compute blocking), memory budgets (attention's 8 MiB K/V group), parallel
// grains of the element-wise kernels, and the Winograd channel limits (ScopedWinogradLimit: an
// algorithm choice that changes results, made by the model loader).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace octodiff::kernels {

struct KernelTuning {
  // f32 GEMM: longest K chunk. A panel's B slice (kc × 32 floats) is reread by every micro-row
  // of a row block (L1, spilling to L2), the A block (mc × kc) by every panel (L2).
  int64_t gemm_kc = 384;
  // Row block of the GEMM drivers, in micro-rows: for micro-kernels of ≥ 8 rows (AVX-512: 8 × 14
  // = 112 rows) and for narrower ones (AVX2 6, generic 4: 16 micro-rows).
  int64_t gemm_mc_micro_rows = 8;
  int64_t gemm_mc_micro_rows_narrow = 16;
  // Column block: panels of 32 columns an A block is reused across (32 = 1024 columns).
  int64_t gemm_nc_panels = 32;
  // A weight of more than this many MiB with few row blocks is streamed panel-group-wise (each B
  // slice read once per K chunk, reused from L2 by every row block) in groups of this many panels
  // (half as many when there are fewer than 8 groups' worth of panels).
  int64_t gemm_stream_b_mib = 8;
  int64_t gemm_stream_panels = 8;
  // How the f32 micro-kernel fetches B before it needs it, for weights streaming from memory to
  // few rows (the text encoder's 77), where the hardware prefetcher restarts at every 4 KiB page.
  // 1: each micro-row prefetches its B slice a few rows ahead of its loads (the text encoder
  // 10–15 % and the f32 UNet 5–15 % faster on Emerald Rapids than 0); 2: the micro-rows reading
  // one slice each fetch a share of the next slice into L2, spread over their k loops (another
  // 11–16 % on the text encoder, 6–7 % on the f32 UNet and VAE there); 0: it leaves that to the
  // hardware. The same bits whichever.
  int64_t gemm_prefetch_b = 0;
  // Rows of the AVX-512 micro-kernels (at most 14: 28 accumulators + the B vectors fill the 32
  // registers). The bf16 widening fallback has at most 12.
  int64_t avx512_mr = 14;
  int64_t avx512_bf16_mr = 14;
  // bf16 GEMM: longest K chunk, even (whole pairs) and at most kBlockLdaBf16 − 32 = 768, the row
  // stride of the driver's A blocks.
  int64_t bf16_kc = 768;
  // Winograd: a thread's block of F(2×2) tiles, in micro-rows (its transformed input and the 16
  // GEMM outputs stay in its caches through the three stages); F(4×4) blocks take 16/36 as many.
  int64_t winograd_micro_rows = 8;
  // Winograd: an output of more than this many KiB is written with non-temporal stores, around the
  // caches (it would be evicted before the next layer reads it, after evicting the block's
  // transformed tiles): 32 MiB, Zen 4's L3 — only the autoencoders' 512² levels; elsewhere the L3
  // the OS reports. 0: never. The same bits either way.
  int64_t winograd_stream_kib = 32768;
  // Winograd: convolutions of at most this many input channels keep each tile's transformed input
  // and GEMM outputs together (all positions of a tile in one row of the scratch), so that the
  // transforms read and write a tile as one run; more channels keep each position's rows
  // together, the GEMMs' operands as one run. 0: never. The same bits either way.
  int64_t winograd_tilewise_channels = 512;
  // Flash attention: key tile Bc (a multiple of 32, the panel width) and query block Br in
  // micro-rows (Br = mr × this): the Br × Bc score tile stays in L1/L2.
  int64_t attention_key_tile = 256;
  int64_t attention_query_micro_rows = 4;
  // 1: attention holds a key tile's scores in columns (Sᵀ = K·Qᵀ, one column per query) for the
  // shapes where that paid (kernels/attention.cpp) where the ISA has VecMath::softmax_columns —
  // float32, and bf16 on widened products with the BF16 instructions; 0: in rows (S = Q·Kᵀ).
  int64_t attention_columns = 0;
  // 1: bf16 products use AVX-512 BF16's VDPBF16PS where the CPU has it; 0: they widen bf16 to
  // float32 and use FMA (the same bits). VDPBF16PS does 2 products + 2 sums per lane and
  // instruction; worth it where it issues as often as an FMA (Zen 4: 2× the FMA rate), not where
  // it issues half as often (Intel Sapphire/Emerald Rapids: the FMA rate, measured). Cores not
  // measured get what a start-up probe of the two instructions says (choose_kernel_tuning).
  int64_t bf16_dot = 1;

  bool operator==(const KernelTuning&) const = default;
};

// The processor as CPUID names it. family and model are the "displayed" values (base + extended
// family; extended model prepended on families 6 and 15+): AMD 25 = Zen 3/4, 26 = Zen 5.
struct CpuIdentity {
  std::string vendor;  // "AuthenticAMD", "GenuineIntel", …
  int family = 0;
  int model = 0;
};
// Per-core data cache sizes in bytes as the OS reports them (0: unknown).
struct CacheSizes {
  int64_t l1d = 0, l2 = 0, l3 = 0;
};

CpuIdentity cpu_identity();  // this CPU (CPUID); empty vendor off x86
CacheSizes cache_sizes();    // this CPU (/sys/devices/system/cpu/cpu0/cache, else sysconf)

// The blocking for a core: AMD family 25 → the values measured on Zen 4 (KernelTuning{});
// AMD family 26 → derived from Zen 5's caches (48 KiB L1D, 1 MiB L2), not yet measured on one;
// anything else → derived from its cache sizes, clamped to the supported ranges, and on Intel
// Sapphire/Emerald Rapids without VDPBF16PS (measured slower there). On the cores not measured
// (neither Zen 4 nor Sapphire/Emerald Rapids), bf16_dot is 0 where `vdpbf16ps_over_fma` is given
// and returns more than 0 and at most 0.75 (the core's VDPBF16PS FLOP rate over its FMA's, as
// measure_vdpbf16ps_over_fma() gives it); called at most once, and not for the measured cores.
// Pure apart from that call.
KernelTuning choose_kernel_tuning(const CpuIdentity& cpu, const CacheSizes& caches,
                                  const std::function<double()>& vdpbf16ps_over_fma = {});

// One overridable value: its key, the range it accepts and whether it must be even or a
// multiple of something.
struct TuningKey {
  const char* name;
  int64_t KernelTuning::*field;
  int64_t min, max, multiple_of;
  const char* what;
};
const std::vector<TuningKey>& kernel_tuning_keys();

// `base` with the "key=value,key=value" overrides applied; throws octodiff::Error naming the key
// and its allowed range for an unknown key, a non-number or a value out of range.
KernelTuning apply_kernel_tuning_overrides(KernelTuning base, const std::string& spec);
// Throws octodiff::Error naming the first value outside its key's range (what a
// ScopedKernelTuning or the environment must not set).
void check_kernel_tuning(const KernelTuning& t);
// "gemm_kc=384,bf16_kc=768,…": every key, in kernel_tuning_keys() order (a valid override).
std::string describe(const KernelTuning& t);

// The tuning in use: choose_kernel_tuning for this CPU (with measure_vdpbf16ps_over_fma() as
// its probe, about 2 ms where it is asked for) with OCTODIFF_KERNEL_TUNING applied, chosen once
// (the first call throws if the variable is malformed), or a ScopedKernelTuning's.
const KernelTuning& kernel_tuning();
// What that start-up choice measured of VDPBF16PS over FMA (0: not asked for, or no AVX-512 BF16).
double probed_vdpbf16ps_over_fma();

// Test/benchmark hook: the kernels use `t` until destroyed. Process-wide, like ScopedKernelIsa:
// not while other threads run kernels.
class ScopedKernelTuning {
 public:
  explicit ScopedKernelTuning(const KernelTuning& t);
  ~ScopedKernelTuning();
  ScopedKernelTuning(const ScopedKernelTuning&) = delete;
  ScopedKernelTuning& operator=(const ScopedKernelTuning&) = delete;

 private:
  KernelTuning tuning_;
  const KernelTuning* previous_;
};

}  // namespace octodiff::kernels
