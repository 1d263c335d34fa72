#!/usr/bin/env bash
# Long runs of the fuzz targets that fuzz/run.sh built: each TARGET for RUNS executions (libFuzzer's
# -runs), one after another, at the lowest CPU priority, with run.sh's options and its seed corpus
# (copied once into BUILD_DIR/long-corpus/TARGET, which the run then grows and a later run resumes).
# Usage: bash fuzz/long_run.sh BUILD_DIR RUNS TARGET...
# Prints each target's exact command, then its executions, time and outcome; the libFuzzer log is
# BUILD_DIR/long-TARGET.log, a crash's input in BUILD_DIR/artifacts/TARGET/. Exit status 0 only
# when every target ran to the end without a crash, leak or timeout.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath "${1:?build dir}")
runs=${2:?runs}
shift 2
[ -d "$dir/corpus" ] || { echo "no $dir/corpus: run fuzz/run.sh $dir first" >&2; exit 2; }
source "$src/fuzz/max_len.sh"  # the same -max_len per target as run.sh
status=0
for t in "$@"; do
  corpus=$dir/long-corpus/$t
  [ -d "$corpus" ] || { mkdir -p "$dir/long-corpus" && cp -r "$dir/corpus/$t" "$corpus"; }
  mkdir -p "$dir/artifacts/$t"
  log=$dir/long-$t.log
  cmd=(nice -n 19 "$dir/fuzz/fuzz_$t" -runs="$runs" -rss_limit_mb=2048 -timeout=20 -max_len="$(max_len "$t")"
       -print_final_stats=1 "$corpus")
  echo "fuzz_$t: (cd $dir/artifacts/$t && ASAN_OPTIONS=detect_leaks=1 ${cmd[*]})"
  start=$(date +%s)
  (cd "$dir/artifacts/$t" && ASAN_OPTIONS=detect_leaks=1 "${cmd[@]}" >"$log" 2>&1)
  rc=$?
  seconds=$(($(date +%s) - start))
  done_runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  if [ $rc -eq 0 ]; then
    echo "fuzz_$t: $done_runs executions in ${seconds}s, no crash, leak or timeout ($(date -u +%H:%M) UTC)"
  else
    status=1
    echo "fuzz_$t: FAILED after ${seconds}s (exit $rc; see $log, the input is in $dir/artifacts/$t)"
    grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -n 20
  fi
done
exit $status
