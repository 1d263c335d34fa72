#!/usr/bin/env bash
# The Debian package end to end: make it, check its contents and metadata, check apt could
# install it here (its Depends resolve), extract it into an empty root and run the app and the CLI
# from that root on the installed demo model — not the source tree's.
# Usage: check_deb.sh SOURCE_DIR PACKAGE_DIR [BUILT_TREE]
# Without BUILT_TREE, packaging/build-deb.sh builds the release package in PACKAGE_DIR (x86-64-v3
# baseline, a full Release build the first time). With BUILT_TREE (a built tree of the same
# sources: the test suite's own), CPack packages that tree's binaries into PACKAGE_DIR without
# building anything; the baseline of a real package build is then checked by check_baseline.sh.
set -euo pipefail
src=$1
dir=$2
built=${3:-}
id=io.github.octodiff.Octodiff
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ -n "$built" ]; then
  [ -f "$built/CPackConfig.cmake" ] || fail "$built is not a configured build tree (no CPackConfig.cmake)"
  rm -rf "$dir" && mkdir -p "$dir"
  cpack --config "$built/CPackConfig.cmake" -G DEB -B "$dir" >/dev/null || fail "cpack failed in $built"
  deb=$(ls -1t "$dir"/octodiff_*_amd64.deb | head -n 1)
else
  deb=$(bash "$src/packaging/build-deb.sh" "$dir" | tail -n 1)
fi
[ -f "$deb" ] || fail "build-deb.sh made no package ($deb)"
echo "package: $deb ($(du -h "$deb" | cut -f1))"
dpkg-deb --field "$deb" Package Version Architecture Depends

contents=$(dpkg-deb --contents "$deb" | awk '{print $6}')
for f in ./usr/bin/octodiff ./usr/bin/octodiff-cli \
         ./usr/share/applications/$id.desktop ./usr/share/metainfo/$id.metainfo.xml \
         ./usr/share/icons/hicolor/scalable/apps/$id.svg ./usr/share/icons/hicolor/256x256/apps/$id.png \
         ./usr/share/icons/hicolor/48x48/apps/$id.png \
         ./usr/share/octodiff/demo-model/model_index.json ./usr/share/octodiff/demo-model/unet/config.json \
         ./usr/share/octodiff/demo-model/taesd/config.json; do
  grep -qx -- "$f" <<<"$contents" || fail "the package lacks $f"
done
if grep -q demo-model-ddim <<<"$contents"; then fail "the package holds demo-model-ddim (the tests' teacher model)"; fi
depends=$(dpkg-deb --field "$deb" Depends)
for lib in libqt6widgets6 libpng16-16 libicu72; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done

# apt could install it: every dependency resolves from this system's sources (a simulation).
apt-get install --simulate -qq "$deb" >/dev/null || fail "apt-get install --simulate $deb failed"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg -x "$deb" "$root"
desktop-file-validate "$root/usr/share/applications/$id.desktop" || fail "desktop entry invalid"
grep -qx 'MimeType=image/png;' "$root/usr/share/applications/$id.desktop" || fail "desktop entry does not open PNGs"
appstreamcli validate --no-net "$root/usr/share/metainfo/$id.metainfo.xml" || fail "metainfo invalid"

# The CLI from the extracted root: the embedded model must come from $root/usr/share/octodiff.
mkdir -p "$root/home"
log=$root/cli.log
env -u OCTODIFF_DEFAULT_MODEL HOME="$root/home" OCTODIFF_CACHE_DIR="$root/cache" \
  "$root/usr/bin/octodiff-cli" generate --prompt "a red circle in the centre" --steps 4 --seed 1 \
  --out "$root/out.png" >"$log" 2>&1 || { cat "$log"; fail "octodiff-cli generate failed"; }
cat "$log"
grep -q "model: $root/usr/share/octodiff/demo-model" "$log" || fail "the CLI did not use the installed model"
[ -s "$root/out.png" ] || fail "no image written"

# The app from the extracted root starts and keeps running (offscreen) until stopped.
set +e
env -u OCTODIFF_DEFAULT_MODEL HOME="$root/home" OCTODIFF_CACHE_DIR="$root/cache" QT_QPA_PLATFORM=offscreen \
  timeout 8 "$root/usr/bin/octodiff" "$root/out.png" >"$root/app.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 124 ] || { cat "$root/app.log"; fail "the app exited with $rc before it was stopped"; }
echo "package installs, validates and runs from a clean root"
