#!/bin/sh
# Runs octodiff-bench on a small model and checks that its --json output has every key issue 6
# asks for. Timings are not checked: this only keeps the end-to-end benchmark working in CI.
# usage: check_bench_json.sh OCTODIFF_BENCH MODEL_DIR [f32|bf16 [--first-load warm|cold [--load-only]]]
set -eu
bench=$1 model=$2
dtype=${3:-f32}
[ $# -ge 3 ] && shift 3 || shift $#
out=$("$bench" --model "$model" --repeats 1 --height 64 --width 64 --dtype "$dtype" --json "$@")
printf '%s\n' "$out"
# --json prints nothing but the JSON object on stdout (progress goes to stderr).
if [ "$(printf '%s\n' "$out" | head -n 1)" != "{" ] || [ "$(printf '%s\n' "$out" | tail -n 1)" != "}" ]; then
  echo "octodiff-bench --json printed something besides one JSON object on stdout" >&2
  exit 1
fi
has() { printf '%s\n' "$out" | grep -q "^  \"$1\": ${2:-}"; }
keys="dtype threads cpu seconds_statistic weight_residency checkpoint_cached_fraction_before_load load_seconds
      peak_rss_mb"
case " $* " in
  *" --load-only "*) ;;
  *) keys="$keys fp32_peak_gflops compile_seconds text_encode_seconds unet_b2_seconds unet_b2_gflops
           unet_b2_fraction_of_peak unet_b1_seconds vae_decode_seconds vae_decode_fraction_of_peak
           unet_b2_executed_gflop unet_b2_first_call_seconds unet_b1_first_call_seconds
           vae_decode_first_call_seconds unet_b2_fraction_of_adjacent_peak unet_b1_fraction_of_adjacent_peak
           vae_decode_fraction_of_adjacent_peak unet_b2_adjacent_peak_gflops"
     # A bf16 run also times the guided step as a bf16 run's first call makes it (split activations).
     [ "$dtype" = bf16 ] && keys="$keys unet_b2_split_seconds" ;;
esac
case " $* " in
  *" --first-load "*)
    # A first load packs afresh (never from the weight cache) and times the checkpoint's read.
    keys="$keys checkpoint_bytes checkpoint_read_seconds checkpoint_read_gb_per_s"
    case " $* " in *" --load-only "*) ;; *) keys="$keys compile_with_packing_seconds" ;; esac
    if ! has load_from_cache false; then
      echo "octodiff-bench --first-load loaded from the weight cache" >&2
      exit 1
    fi ;;
esac
for key in $keys; do
  if ! has "$key"; then
    echo "octodiff-bench --json has no top-level \"$key\"" >&2
    exit 1
  fi
done
echo "all keys present"
