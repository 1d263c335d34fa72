#!/usr/bin/env bash
# Installs Octodiff's build and test dependencies from Debian 12 packages. Idempotent: when
# everything is already installed it does nothing (and needs no network).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  qt6-base-dev libgl-dev
  libeigen3-dev libpng-dev nlohmann-json3-dev libicu-dev libopencv-imgproc-dev libmsgpack-cxx-dev
  libgtest-dev libbenchmark-dev
  appstream desktop-file-utils xvfb xauth
  clang libclang-rt-14-dev lld
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
