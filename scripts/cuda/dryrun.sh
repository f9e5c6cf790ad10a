#!/usr/bin/env bash
# Check a bundle from scripts/cuda/build.sh on the build machine, no GPU
# needed: run target/cuda-bundle/run.sh the way the GPU machine will (a copy
# of the committed tree, a private /tmp, CUDA 13 libraries found by probing),
# with the PyPI libraries of target/cuda-venv and the link-time libcuda stub
# as the "driver". Every test that does not touch the GPU must pass; the GPU
# tests must fail with CUDA_ERROR_STUB_LIBRARY (and nothing else), which
# shows that the binaries load, resolve every CUDA 13 symbol, and that nvrtc
# finds the headers at the paths baked into them.
#
#   scripts/cuda/dryrun.sh        # results in target/cuda-dryrun/out
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=$ROOT/target/cuda-bundle
[ -f "$B/run.sh" ] || { echo "no bundle: run scripts/cuda/build.sh first" >&2; exit 1; }
CU=$("$ROOT/target/cuda-venv/bin/python" -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
D=$ROOT/target/cuda-dryrun
rm -rf "$D" && mkdir -p "$D/repo/target" "$D/driver" "$D/out"
git -C "$ROOT" archive HEAD | tar -x -C "$D/repo"
cp -r "$B" "$D/repo/target/"
ln -s "$ROOT/target/cuda-root/lib64/stubs/libcuda.so" "$D/driver/libcuda.so.1"

inner="cd '$D/repo' && OUT='$D/out' CUDA_LIB_DIR='$CU/lib' LD_LIBRARY_PATH='$D/driver' bash target/cuda-bundle/run.sh"
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1; then
  unshare -m bash -c "mount -t tmpfs none /tmp && $inner" || true
else
  echo "no unshare: running with the shared /tmp" >&2
  bash -c "$inner" || true
fi

bad=0
while read -r name rc _; do
  case $name in binaries:) continue ;; esac
  log=$D/out/$name.log
  if [ "$rc" = rc=0 ]; then continue; fi
  failed=$(grep -cE '^---- .* stdout ----$' "$log" || true)
  stub=$(grep -c 'CUDA_ERROR_STUB_LIBRARY' "$log" || true)
  if [ "${name#example-}" != "$name" ] && [ "$stub" -gt 0 ]; then
    echo "$name: stopped at the stub driver, as expected"
  elif [ "$failed" -gt 0 ] && [ "$failed" = "$stub" ]; then
    echo "$name: its $failed GPU tests stopped at the stub driver, as expected"
  else
    echo "$name: FAILED for another reason, see $log"; bad=1
  fi
done < "$D/out/summary.txt"
grep -q ': ok$' "$D/out/env.txt" || { echo "nvrtc preflight failed, see $D/out/env.txt"; bad=1; }
[ $bad = 0 ] && echo "dry run ok" || echo "dry run FAILED"
exit $bad
