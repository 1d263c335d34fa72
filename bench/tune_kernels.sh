#!/bin/sh
# Sweeps the kernel blocking (engine/kernels/tuning.h) on the UNet's hot GEMM, convolution and
# attention shapes: for each key of the grid, each candidate value is run alone on top of the
# tuning the CPU gets (OCTODIFF_KERNEL_TUNING="key=value"), then a table per shape shows of_peak
# per setting and the best. The tool a session on a new core (Zen 5, …) runs to fill in its values.
#
#   bench/tune_kernels.sh [--bench build/bench/octodiff-kernel-bench] [--reps 3] [--min-time 0.2]
#                         [--grid "gemm_kc=256,384,512;bf16_kc=512,768"] [--filter REGEX] [--out DIR]
#                         [--paired]
#
# --grid   keys and candidates, ';' between keys (default: the small grid below). The keys and
#          their ranges: any bad key makes the bench print them.
# --filter benchmark regex for every key (default: per key, the hot shapes that key affects).
# --out    directory for the raw Google Benchmark JSON of every run (default ./tune-DATE).
# --paired each setting runs as OCTODIFF_BENCH_VERSUS="key=value" instead: every iteration runs
#          the CPU's tuning and the setting back to back, and the table gives the median speed-up
#          of the setting over the chosen tuning (1.10 = 10 % faster). Separate runs compare what
#          the machine gave each run: on a shared VM that swings 2x from run to run, use this.
# The environment passes through: on a quiet machine run as is (2 threads: the deployment's
# figure); on a shared one, OCTODIFF_THREADS=1 OCTODIFF_BENCH_CPU_TIME=1.
set -eu

bench=build/bench/octodiff-kernel-bench
reps=3
min_time=0.2
grid="gemm_kc=256,384,512,576,768;bf16_kc=384,512,640,768;attention_key_tile=128,256,512;attention_columns=0,1;winograd_micro_rows=2,4,8,16;winograd_stream_kib=0,32768;winograd_tilewise_channels=0,128,512,4096;gemm_mc_micro_rows=4,8,12;bf16_dot=0,1;gemm_prefetch_b=0,1,2"
filter=""
out="tune-$(date -u +%Y%m%d-%H%M%S)"
paired=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --min-time) min_time=$2; shift 2 ;;
    --grid) grid=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --paired) paired=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "tune_kernels.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$bench" ] || { echo "tune_kernels.sh: no benchmark at $bench (build octodiff-kernel-bench, or --bench PATH)" >&2; exit 2; }
mkdir -p "$out"

# The hot shapes of SD 1.5 at 512x512 (batch 2), as kernels_bench.cpp names them.
gemm='BM_Gemm(Bf16)?/M:(8192/K:320/N:2560|2048/K:2560/N:640|512/K:1280/N:10240)(/real_time)?$'
conv='BM_Conv(Bf16)?/N:2/HW:(16|8)/Ci:1280/Co:1280/k:3(/real_time)?$'
wino='BM_ConvWinograd(Bf16)?/N:2/HW:(64/Ci:320/Co:320|32/Ci:640/Co:640)/k:3(/real_time)?$'
attn='BM_Attention(Bf16)?/B:2/Lq:(4096/Lk:4096/H:8/d:40|1024/Lk:1024/H:8/d:80)(/real_time)?$'

# Which shapes a key changes (so that a sweep does not rerun the others): f32 or bf16 variants.
f32_only() { echo "$1" | sed 's/(Bf16)?//g'; }
bf16_only() { echo "$1" | sed 's/(Bf16)?/Bf16/g'; }
shapes_for() {
  [ -n "$filter" ] && { echo "$filter"; return; }
  case "$1" in
    gemm_kc) f32_only "($gemm|$conv|$wino)" ;;
    avx512_mr) f32_only "($gemm|$conv|$wino|$attn)" ;;
    bf16_kc) bf16_only "($gemm|$conv|$wino)" ;;
    avx512_bf16_mr) bf16_only "($gemm|$conv|$wino|$attn)" ;;
    bf16_dot) bf16_only "($gemm|$conv|$wino|$attn)" ;;
    gemm_prefetch_b) echo "(BM_TextEncoderLayers/.*|$(f32_only "$gemm"))" ;;
    gemm_*) echo "($gemm|$conv)" ;;
    attention_columns) f32_only "$attn" ;;
    attention_*) echo "$attn" ;;
    winograd_*) echo "$wino" ;;
    *) echo "($gemm|$conv|$wino|$attn)" ;;
  esac
}

run() {  # run NAME TUNING FILTER
  echo "tune_kernels.sh: $1 ..." >&2
  var=OCTODIFF_KERNEL_TUNING  # the setting instead of the chosen tuning, or (--paired) beside it
  [ "$paired" = 1 ] && [ -n "$2" ] && var=OCTODIFF_BENCH_VERSUS
  env "$var=$2" "$bench" --benchmark_filter="$3" --benchmark_repetitions="$reps" \
    --benchmark_min_time="$min_time" --benchmark_report_aggregates_only=true \
    --benchmark_format=json --benchmark_out_format=json --benchmark_out="$out/$1.json" >/dev/null
}

run chosen "" "$(shapes_for all)"
echo "$grid" | tr ';' '\n' | while IFS='=' read -r key values; do
  [ -n "$key" ] || continue
  for v in $(echo "$values" | tr ',' ' '); do run "$key=$v" "$key=$v" "$(shapes_for "$key")"; done
done

python3 - "$out" "$paired" <<'EOF'
import glob, json, os, sys
out, paired = sys.argv[1], sys.argv[2] == "1"
table = {}  # shape -> {setting: (median GFLOP/s, median of_peak)}
speedups = {}  # paired: shape -> {setting: median versus_speedup}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    setting = os.path.basename(path)[:-5]
    data = json.load(open(path))
    for b in data["benchmarks"]:
        if b.get("aggregate_name") not in ("median", None) or "of_peak" not in b:
            continue
        if "versus_speedup" in b:
            speedups.setdefault(b["run_name"], {})[setting] = b["versus_speedup"]
        else:
            table.setdefault(b["run_name"], {})[setting] = (b["FLOPS"] / 1e9, b["of_peak"])
context = json.load(open(os.path.join(out, "chosen.json")))["context"]
print("CPU:", context.get("octodiff_cpu"), "|", context.get("octodiff_caches"), "| threads", context.get("octodiff_threads"))
print("chosen tuning:", context.get("octodiff_kernel_tuning"))
if paired:
    print("Paired: each setting's speed-up over the chosen tuning, median over back-to-back pairs")
    print("(medians of the repetitions); above 1 is faster. 'chosen' is the chosen tuning's own run.\n")
    for shape in sorted(set(table) | set(speedups)):
        print(shape)
        if shape in table:
            print(f"  {'chosen':32s} {table[shape]['chosen'][0]:7.1f} GFLOP/s  {table[shape]['chosen'][1]:.3f}")
        runs = speedups.get(shape, {})
        best = max(runs, key=runs.get) if runs else None
        for setting in sorted(runs):
            mark = "  <- best" if setting == best and runs[setting] > 1 else ""
            print(f"  {setting:32s} x{runs[setting]:.3f}{mark}")
        print()
    sys.exit(0)
print("GFLOP/s and of_peak, medians of the repetitions; 'chosen' is the CPU's own tuning, the others")
print("change one key. Best by GFLOP/s: every run measures its own peak, and bf16_dot changes which")
print("instruction the bf16 peak is. Winograd rows count the direct convolution's products.\n")
for shape in sorted(table):
    runs = table[shape]
    best = max(runs, key=lambda s: runs[s][0])
    print(shape)
    for setting in sorted(runs, key=lambda s: (s != "chosen", s)):
        mark = "  <- best" if setting == best else ""
        print(f"  {setting:32s} {runs[setting][0]:7.1f} GFLOP/s  {runs[setting][1]:.3f}{mark}")
    print()
EOF
echo "raw results: $out/" >&2
