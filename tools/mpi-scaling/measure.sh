#!/usr/bin/env bash
# Sweep throughput of octodiff-cli in one process and over MPI ranks, ranks × threads = 2, on the
# embedded demo model (docs/mpi-scaling.md). Prints one line per configuration: items, seconds,
# items per minute, and the 1-minute load average before and after (the machine is shared).
#
#   bash tools/mpi-scaling/measure.sh build/engine/cli/octodiff-cli [OUT_DIR] [SEEDS] [STEPS] [reverse]
set -euo pipefail
cli=$(realpath "${1:?usage: measure.sh OCTODIFF_CLI [OUT_DIR] [SEEDS A-B] [STEPS]}")
out=${2:-/tmp/octodiff-mpi-scaling}
seeds=${3:-0-23}
steps=${4:-20}
half="${seeds%-*}-$(( (${seeds#*-} - ${seeds%-*} + 1) / 2 + ${seeds%-*} - 1 ))"
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
rm -rf "$out" && mkdir -p "$out"

# run NAME SEEDS THREADS [LAUNCHER…]: one sweep into its own folder, then its line.
run() {
  local name=$1 range=$2 threads=$3
  shift 3
  local before after
  before=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%U %S" -o "$out/$name.cpu" "$@" "$cli" generate --threads "$threads" \
    --prompt "a small red circle on a blue background" --seeds "$range" --steps "$steps" \
    --out-dir "$out/$name" --json --quiet >"$out/$name.json" 2>"$out/$name.err"
  after=$(cut -d' ' -f1 /proc/loadavg)
  python3 - "$out/$name.json" "$name" "$before" "$after" "$out/$name.cpu" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["sweep"]
cpu = sum(float(x) for x in open(sys.argv[5]).read().split()[-2:])  # user + sys of the whole job
per_rank = ", ".join(f"r{r['rank']}: {r['items']} items {r['seconds_per_item']:.2f} s/item" for r in s["ranks"])
print(f"{sys.argv[2]:<24} {s['written']:3d} items {s['seconds']:6.2f} s {s['items_per_minute']:6.1f} items/min"
      f"  {cpu / max(1, s['written']):.3f} CPU s/item  load {sys.argv[3]} -> {sys.argv[4]}  ({per_rank})")
PY
}

# Strong scaling: the same sweep on 2 cores, as 1 rank × 2 threads or 2 ranks × 1 thread (the
# order reversed by a fifth argument "reverse", to see drift in the machine's load).
# Weak scaling: half the items on 1 rank × 1 thread, all of them on 2 ranks × 1 thread.
configs=(one two mpi1 half)
[ "${5:-}" = reverse ] && configs=(half mpi1 two one)
for c in "${configs[@]}"; do
  case $c in
    one) run "1rank-2threads" "$seeds" 2 ;;
    mpi1) run "1rank-2threads-mpirun" "$seeds" 2 "${mpirun[@]}" -n 1 ;;
    two) run "2ranks-1thread" "$seeds" 1 "${mpirun[@]}" -n 2 ;;
    half) run "1rank-1thread-half" "$half" 1 ;;
  esac
done
