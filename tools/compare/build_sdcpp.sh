#!/bin/bash
# Builds stable-diffusion.cpp's sd-cli (outside this repository) for a per-core comparison with
# octodiff on the same random model files. Nothing of it enters octodiff's build.
#
#   bash tools/compare/build_sdcpp.sh SDCPP_GIT_DIR GGML_GIT_DIR OUT_DIR
#
# SDCPP_GIT_DIR, GGML_GIT_DIR: bare git directories of github:leejet/stable-diffusion.cpp and
# github:ggml-org/ggml (the search tool's fetch); ggml at the commit stable-diffusion.cpp's HEAD
# pins as its submodule. Blobs a snapshot lacks (the large tokenizer vocabularies of models other
# than CLIP) become one-byte stand-ins: SD's CLIP vocabulary (clip_merges.hpp) must be present.
# The server example (its web frontend is another submodule) is left out. Release build, ggml's
# default GGML_NATIVE (-march=native). Then, for SD-Turbo (octodiff-cli make-random-model --arch
# sd-turbo --layout single-file) with a diffusers AutoencoderTiny file:
#   OUT_DIR/build/bin/sd-cli -m model.safetensors --taesd diffusion_pytorch_model.safetensors \
#     -p "a photograph of an astronaut riding a horse" --steps 1 --cfg-scale 1 -H 512 -W 512 -t 2 \
#     --sampling-method euler --type f32|f16|q8_0 [--diffusion-fa]
set -euo pipefail
sd=$1 ggml=$2 out=$3
[ ! -e "$out" ] || { echo "build_sdcpp: $out exists" >&2; exit 1; }
mkdir -p "$out"
cd "$out"
git --git-dir "$sd" ls-tree -r HEAD CMakeLists.txt cmake src include examples thirdparty |
  while read -r mode type hash path; do
    [ "$type" = blob ] || continue
    mkdir -p "$(dirname "$path")"
    if git --git-dir "$sd" cat-file -e "$hash" 2>/dev/null; then
      git --git-dir "$sd" cat-file blob "$hash" > "$path"
    else
      case "$path" in
        src/tokenizers/vocab/clip_*) echo "build_sdcpp: $path is missing from the snapshot" >&2; exit 1 ;;
        src/tokenizers/vocab/*.hpp)
          # the array name vocab.cpp reads from this header, e.g. gemma_merges_utf8_c_str
          name=$(git --git-dir "$sd" show HEAD:src/tokenizers/vocab/vocab.cpp |
                 grep -o "[a-z0-9_]*_\(utf8_c_str\|json_str\)" | sort -u |
                 grep "^$(basename "$path" .hpp | sed 's/qwen_/qwen2_/; s/_vocab$/_vocab_json/; s/^t5$/t5_tokenizer/; s/^umt5$/umt5_tokenizer/')" | head -1)
          echo "static const unsigned char ${name}[] = {0x20};  // stand-in: blob absent from the snapshot" > "$path" ;;
        *) echo "build_sdcpp: $path is missing from the snapshot" >&2; exit 1 ;;
      esac
    fi
  done
pin=$(git --git-dir "$sd" ls-tree HEAD ggml | awk '{print $3}')
mkdir -p ggml
git --git-dir "$ggml" archive "$pin" | tar -x -C ggml
sed -i 's/^add_subdirectory(server)/# add_subdirectory(server)/' examples/CMakeLists.txt
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --target sd-cli
echo "built $out/build/bin/sd-cli (stable-diffusion.cpp $(git --git-dir "$sd" rev-parse --short HEAD), ggml ${pin:0:8})"
