#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan + UBSan in their own build tree and runs each
# for SECONDS (default 10) on a seed corpus made from the repository's own test files.
# Usage: bash fuzz/run.sh [BUILD_DIR] [SECONDS] [TARGET...]
# Exit status 0 only when every target built and ran without a crash, leak or timeout; the
# per-target executions are printed (and kept in BUILD_DIR/fuzz-results.txt).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${1:-$src/build-fuzz}")
seconds=${2:-10}
shift $(( $# > 2 ? 2 : $# ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors npy png png_metadata configs tokenizer lora single_file flax_msgpack prompt)

# -O1 with line tables only (libFuzzer's usual choice): about half the compile time of -O2 -g
# under the sanitizers, and stack traces still name file and line. Only the parsers are compiled
# (fuzz/CMakeLists.txt); ccache, when present, is used as in every build (top-level CMakeLists),
# with paths relative to the checkout so that another checkout's objects are reused.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$src}
cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DOCTODIFF_FUZZ=ON -DOCTODIFF_SANITIZE="address;undefined" -DOCTODIFF_BUILD_GUI=OFF \
  -DOCTODIFF_BUILD_TESTS=OFF -DOCTODIFF_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" --target fuzz_targets

corpus=$dir/corpus
rm -rf "$corpus"
add() {  # add TARGET FILE...
  local t=$1
  shift
  mkdir -p "$corpus/$t"
  local i=0
  for f in "$@"; do cp "$f" "$corpus/$t/$i-$(basename "$f")"; i=$((i + 1)); done
}
add safetensors $(find "$src/tests/data" -name '*.safetensors' -size -300k | sort | head -n 20)
add npy $(find "$src/tests/data" -name '*.npy' -size -200k | sort | head -n 10)
add png $(find "$src/tests/data" -name '*.png' -size -100k | sort | head -n 10)
add png_metadata "$src"/fuzz/corpus/png_metadata/*
add configs $(find "$src/tests/data" "$src/resources/demo-model" -name '*config*.json' | sort)
add lora "$src"/tests/data/tiny-sd-lora/*.safetensors
add single_file "$src"/fuzz/corpus/single_file/* "$src"/tests/data/tiny-sd-lora/kohya_ldm.safetensors
add flax_msgpack $(find "$src/tests/data" -name '*.msgpack' -size -300k | sort | head -n 10)
mkdir -p "$corpus/prompt"
i=0
for emb in "$src"/tests/data/tiny-sd-prompts/embeddings/*.safetensors; do
  { printf 'a (castle:1.3) on a ((cliff)), [fog] \\(literal\\) BREAK storm, (a [b:0.5] c:1.2)\n@@\n'; cat "$emb"; } \
    >"$corpus/prompt/$i-$(basename "$emb")"
  i=$((i + 1))
done
tok=$src/tests/data/tiny-sd/tokenizer
mkdir -p "$corpus/tokenizer"
{ cat "$tok/vocab.json"; printf '\n@@\n'; cat "$tok/merges.txt"; printf '\n@@\n'; cat "$tok/tokenizer_config.json";
  printf '\n@@\na photograph of an astronaut riding a horse, caf\xc3\xa9 \xe2\x80\x94 <|endoftext|>'; } >"$corpus/tokenizer/tiny-sd"

source "$src/fuzz/max_len.sh"  # -max_len per target

results=$dir/fuzz-results.txt
: >"$results"
status=0
for t in "${targets[@]}"; do
  log=$dir/fuzz_$t.log
  mkdir -p "$dir/artifacts/$t"
  if (cd "$dir/artifacts/$t" && ASAN_OPTIONS=detect_leaks=1 "$dir/fuzz/fuzz_$t" -max_total_time="$seconds" \
        -rss_limit_mb=2048 -timeout=20 -max_len="$(max_len "$t")" -print_final_stats=1 "$corpus/$t" >"$log" 2>&1); then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz_$t: $runs executions in ${seconds}s, no crash" | tee -a "$results"
  else
    status=1
    echo "fuzz_$t: FAILED (see $log; the input is in $dir/artifacts/$t)" | tee -a "$results"
    grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -n 20
  fi
done
exit $status
