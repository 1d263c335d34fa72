#!/bin/sh
# Runs octodiff-bench on a small model and checks that its --json output has every key issue 6
# asks for. Timings are not checked: this only keeps the end-to-end benchmark working in CI.
# usage: check_bench_json.sh OCTODIFF_BENCH MODEL_DIR [f32|bf16]
set -eu
dtype=${3:-f32}
out=$("$1" --model "$2" --repeats 1 --height 64 --width 64 --dtype "$dtype" --json)
printf '%s\n' "$out"
keys="fp32_peak_gflops compile_seconds text_encode_seconds unet_b2_seconds unet_b2_gflops
      unet_b2_fraction_of_peak unet_b1_seconds vae_decode_seconds vae_decode_fraction_of_peak
      peak_rss_mb dtype threads checkpoint_cached_fraction_before_load unet_b2_executed_gflop"
# A bf16 run also times the guided step as a bf16 run's first call makes it (split activations).
[ "$dtype" = bf16 ] && keys="$keys unet_b2_split_seconds"
for key in $keys; do
  if ! printf '%s\n' "$out" | grep -q "^  \"$key\": "; then
    echo "octodiff-bench --json has no top-level \"$key\"" >&2
    exit 1
  fi
done
echo "all keys present"
