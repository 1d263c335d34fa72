#!/bin/sh
# Runs octodiff-bench's few-step report (--arch sd-turbo|lcm-sd15) on a small model at 64×64 and
# checks its --json output: JSON only on stdout, every section and figure present, one UNet pass
# a step, the grid on 8 devices. Timings are not checked: this keeps the benchmark working in CI.
# usage: check_few_step_json.sh OCTODIFF_BENCH MODEL_DIR ARCH STEPS DTYPE [more octodiff-bench options]
set -eu
bench=$1 model=$2 arch=$3 steps=$4 dtype=$5
shift 5
out=$("$bench" --model "$model" --arch "$arch" --repeats 1 --height 64 --width 64 --dtype "$dtype" --json "$@")
printf '%s\n' "$out"
if [ "$(printf '%s\n' "$out" | head -n 1)" != "{" ] || [ "$(printf '%s\n' "$out" | tail -n 1)" != "}" ]; then
  echo "octodiff-bench --json printed something besides one JSON object on stdout" >&2
  exit 1
fi
# has INDENT KEY [VALUE]: a line `KEY: VALUE` at that nesting depth (2 spaces a level).
has() { printf '%s\n' "$out" | grep -q "^$1\"$2\": ${3:-}"; }
need() {
  if ! has "$@"; then
    echo "octodiff-bench --json has no \"$2\"${3:+ with value $3} at depth $(( ${#1} / 2 ))" >&2
    exit 1
  fi
}
for key in dtype threads cpu taesd load_seconds fp32_peak_gflops peak_rss_mb few_step; do need "  " "$key"; done
for key in arch steps guidance scheduler networks image_taesd image_vae one_step_image_taesd one_step_image_taesd_prompt_seen \
           one_step_grid_2x4_taesd one_step_image_and_unet_b1_in_pairs unet_per_step_seconds checks; do need "    " "$key"; done
for key in text_encode_seconds unet_b1_seconds unet_b1_first_call_seconds unet_b1_gflops \
           unet_b1_fraction_of_peak vae_decode_seconds taesd_decode_seconds taesd_decode_fraction_of_peak \
           one_step_image_vs_unet_b1 taesd_decode_vs_unet_b1 grid_2x4_vs_one_step_image \
           one_step_image_vs_its_unet_phase seconds_over_denoise call_denoise_seconds \
           one_step_image_vs_unet_b1_in_pairs image_over_unet_call median_ratio \
           taesd_decode_vs_unet_b1_in_pairs taesd_decode_over_unet_call median_taesd_ratio \
           image_text_encode_seconds image_text_rows_encoded; do
  need "      " "$key"
done
# The paired images (issue 20's ratios) each encoded a prompt of their own, none from the cache.
need "      " every_image_encoded_its_prompt true
need "    " arch "\"$arch\""
need "    " steps "$steps"
# One UNet pass a step (no classifier-free-guidance batch): the image makes STEPS calls, the
# one-step image and grid one; the grid runs 8 devices; TAESD and the VAE both decode.
need "      " unet_calls_per_device "$steps"
need "      " unet_calls_per_device 1
need "      " devices 8
need "      " decoder '"taesd"'
need "      " decoder '"vae"'
for key in ratio target_at_most met; do need "        " "$key"; done
for key in call_minor_page_faults call_system_cpu_seconds; do need "      " "$key"; done
echo "all keys present"
