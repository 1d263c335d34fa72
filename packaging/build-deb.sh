#!/usr/bin/env bash
# Builds the Debian package: a Release build for the x86-64-v3 baseline (-DOCTODIFF_NATIVE=OFF;
# the AVX-512 kernels are reached by runtime dispatch), no tests or benchmarks, then CPack.
# Usage: bash packaging/build-deb.sh [BUILD_DIR] [--configure-only]   (default: build-package)
# Prints the path of the .deb on its last line (with --configure-only: the build folder, configured
# as for the package, whose compile_commands.json tests/package/check_baseline.sh reads).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-package}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTODIFF_NATIVE=OFF \
  -DOCTODIFF_BUILD_TESTS=OFF -DOCTODIFF_BUILD_BENCH=OFF >/dev/null
if [ "${2:-}" = "--configure-only" ]; then
  echo "$dir"
  exit 0
fi
cmake --build "$dir"
(cd "$dir" && cpack -G DEB >/dev/null)
ls -1t "$dir"/octodiff_*_amd64.deb | head -n 1
