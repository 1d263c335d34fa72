#!/usr/bin/env bash
# The package's instruction-set baseline without building it: packaging/build-deb.sh configures
# its build folder, and every compile command there must target x86-64-v3 and nothing newer,
# except the *_avx512.cpp kernels (reached by runtime dispatch, engine/core/cpu.h), and none may
# say -march=native. This is what makes the packaged binaries start on any x86-64-v3 machine.
# Usage: check_baseline.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
dir=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
bash "$src/packaging/build-deb.sh" "$dir" --configure-only >/dev/null
db=$dir/compile_commands.json
[ -s "$db" ] || fail "no $db"
python3 - "$db" <<'PY' || fail "the package build is not x86-64-v3 only (see above)"
import json, sys
entries = json.load(open(sys.argv[1]))
bad = []
counts = {"baseline": 0, "avx512 dispatch": 0}
for e in entries:
    cmd, f = e["command"], e["file"]
    if "-march=native" in cmd or "-march=x86-64-v3" not in cmd:
        bad.append(f"{f}: not compiled for -march=x86-64-v3")
        continue
    if "-mavx512" in cmd:
        if f.endswith("_avx512.cpp"):
            counts["avx512 dispatch"] += 1
        else:
            bad.append(f"{f}: AVX-512 outside a *_avx512.cpp dispatch file")
    else:
        counts["baseline"] += 1
for b in bad:
    print("  " + b)
print(f"{len(entries)} compile commands: {counts['baseline']} x86-64-v3, "
      f"{counts['avx512 dispatch']} AVX-512 dispatch files")
sys.exit(1 if bad or counts["baseline"] == 0 else 0)
PY
echo "the package build targets x86-64-v3 (AVX-512 only in dispatch files)"
