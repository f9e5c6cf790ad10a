#!/usr/bin/env bash
# Run a bundle made by scripts/cuda/build.sh on a GPU machine with CUDA 13
# system libraries and no Rust. Copied into target/cuda-bundle/run.sh.
#
#   bash target/cuda-bundle/run.sh [TEST-HARNESS ARGS...]   e.g. --test-threads=1
#
# Results go to $OUT (default: ./cuda-results): env.txt (what was found),
# one log per binary, summary.txt. Exit status: 0 when every binary passed.
#
# Knobs: OUT, FLAXEN_REPO (the flaxen checkout the tests read fixtures from;
# default: two levels above this bundle), CUDA_LIB_DIR / CUDA_INCLUDE (force
# the CUDA 13 library / header directory), TEST_TIMEOUT (seconds per binary,
# default 600), RUN_EXAMPLES=0 to skip the examples.
set -uo pipefail

BUNDLE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/cuda-results}
mkdir -p "$OUT"
REPO=${FLAXEN_REPO:-$(cd "$BUNDLE/../.." && pwd)}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
# shellcheck disable=SC1091
. "$BUNDLE/manifest.env"
PREFIX=$FLAXEN_CUDA_PREFIX
ENVF=$OUT/env.txt
: > "$ENVF"
log() { printf '%s\n' "$*" | tee -a "$ENVF" >&2; }

log "bundle: $BUNDLE (flaxen $GIT_COMMIT, features $FEATURES, sm_$CUDA_COMPUTE_CAP)"
log "built with: $TOOLKIT"
log "repo: $REPO"
{ nvidia-smi 2>&1 || echo "nvidia-smi failed"; } >> "$ENVF"

# ---- CUDA 13 libraries: libcuda.so.1 (driver) + nvrtc, cublas, cublasLt
need=(libnvrtc.so.13 libcublas.so.13 libcublasLt.so.13)
has_all() { local f; for f in "${need[@]}"; do [ -e "$1/$f" ] || return 1; done; }
cands=()
[ -n "${CUDA_LIB_DIR:-}" ] && cands+=("$CUDA_LIB_DIR")
for h in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-13* /opt/cuda /usr/lib/cuda; do
  [ -n "$h" ] && cands+=("$h/lib64" "$h/lib" "$h/targets/x86_64-linux/lib" "$h/targets/sbsa-linux/lib")
done
cands+=(/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib)
for py in python3 python; do
  command -v "$py" >/dev/null 2>&1 || continue
  while read -r sp; do
    cands+=("$sp/nvidia/cu13/lib")
    for d in "$sp"/nvidia/*/lib; do [ -d "$d" ] && cands+=("$d"); done
  done < <("$py" -c 'import site,sys; print("\n".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null)
done
libdirs=()
for d in "${cands[@]}"; do
  [ -d "$d" ] || continue
  if has_all "$d"; then libdirs=("$d"); break; fi
done
if [ ${#libdirs[@]} = 0 ]; then
  # pip layout of older wheels: one package per library
  for f in "${need[@]}"; do
    for d in "${cands[@]}"; do
      if [ -e "$d/$f" ]; then libdirs+=("$d"); break; fi
    done
  done
fi
# the driver: normally in the loader's cache; add its folder if it is not
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib "${cands[@]}"; do
    if [ -e "$d/libcuda.so.1" ]; then libdirs+=("$d"); break; fi
  done
fi
LIBPATH=$(printf '%s:' "${libdirs[@]}")
export LD_LIBRARY_PATH=${LIBPATH}${LD_LIBRARY_PATH:-}
log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# ---- the paths the binaries were built with, recreated under $PREFIX
#   $DFDX_CUDA_INCLUDE_DIR ($PREFIX/root/include): cuda_fp16.h for dfdx's
#     run-time (nvrtc) kernels
#   $DFDX_OUT_DIR: dfdx's .cuh files, for the same kernels
#   $PREFIX/src: the flaxen checkout (CARGO_MANIFEST_DIR: fixtures)
inc=${CUDA_INCLUDE:-}
if [ -z "$inc" ]; then
  for d in "${libdirs[@]}"; do
    for c in "$d/../include" "$d/../../include"; do
      if [ -f "$c/cuda_fp16.h" ]; then inc=$(cd "$c" && pwd); break 2; fi
    done
  done
fi
if [ -z "$inc" ]; then
  for c in /usr/local/cuda/include /usr/local/cuda-13*/include /usr/include; do
    if [ -f "$c/cuda_fp16.h" ]; then inc=$c; break; fi
  done
fi
[ -n "$inc" ] || inc=$BUNDLE/include
log "nvrtc include dir: $inc"
if [ -e "$PREFIX" ] && [ ! -w "$PREFIX" ]; then log "cannot write $PREFIX"; fi
mkdir -p "$(dirname "$DFDX_CUDA_INCLUDE_DIR")" "$DFDX_OUT_DIR"
ln -sfn "$inc" "$DFDX_CUDA_INCLUDE_DIR"
cp "$BUNDLE"/cuh/*.cuh "$DFDX_OUT_DIR/"
ln -sfn "$REPO" "$PREFIX/src"

# ---- preflight: dfdx's run-time (nvrtc) kernels with the baked include paths
if command -v python3 >/dev/null 2>&1; then
  python3 "$BUNDLE/nvrtc_check.py" "sm_$CUDA_COMPUTE_CAP" "$BUNDLE/nvrtc" "$NVRTC_TYPES" \
    "$DFDX_CUDA_INCLUDE_DIR" "$DFDX_OUT_DIR" 2>&1 |
    tee -a "$ENVF" >&2
fi

# ---- run
fail=0
summary=$OUT/summary.txt
: > "$summary"
run_one() { # name, folder (relative to the repo), logfile, command...
  local name=$1 dir=$2 logf=$3; shift 3
  local t0 ms rc
  t0=$(date +%s%N)
  (cd "$PREFIX/src/$dir" && timeout "$TEST_TIMEOUT" "$@") < /dev/null > "$logf" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  printf '%-36s rc=%-3s %4d.%03ds  %s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) \
    "$(grep -E '^test result:' "$logf" | tail -1)" | tee -a "$summary" >&2
  [ "$rc" = 0 ] || fail=1
}
# bins.tsv: BINARY<TAB>PACKAGE-FOLDER, the folder cargo test would run it in
while IFS=$'\t' read -r rel dir; do
  bin=$BUNDLE/$rel
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  if ! ldd "$bin" > "$OUT/$name.ldd" 2>&1 || grep -q 'not found' "$OUT/$name.ldd"; then
    log "$name: missing libraries:"; grep 'not found' "$OUT/$name.ldd" | tee -a "$ENVF" >&2
  fi
  run_one "$name" "$dir" "$OUT/$name.log" "$bin" "$@"
done < "$BUNDLE/bins.tsv"
if [ "${RUN_EXAMPLES:-1}" != 0 ] && [ -s "$BUNDLE/examples.run" ]; then
  # one line per run: NAME ARGS... ($OUT in ARGS is replaced by the results folder)
  while read -r name args; do
    [ -n "$name" ] && [ "${name#\#}" = "$name" ] || continue
    args=${args//\$OUT/$OUT}
    # shellcheck disable=SC2086
    run_one "example-$name" . "$OUT/example-$name.log" "$BUNDLE/examples/$name" $args
  done < "$BUNDLE/examples.run"
fi
passed=$(grep -c 'rc=0 ' "$summary"); total=$(wc -l < "$summary")
echo "binaries: $passed passed, $((total - passed)) failed" | tee -a "$summary"
exit $fail
