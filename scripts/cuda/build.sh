#!/usr/bin/env bash
# Cross-build flaxen's `cuda` feature test binaries on a machine WITHOUT a GPU
# or a CUDA toolkit, for a GPU machine WITHOUT Rust (see docs/cuda.md).
#
#   scripts/cuda/build.sh            # tests of the workspace, features "cuda"
#   FEATURES=cuda,f16 EXAMPLES="bench_scan train" scripts/cuda/build.sh
#
# What it does:
#   1. a venv (target/cuda-venv) with the CUDA 13.0 toolkit pieces from PyPI
#      (nvcc + cicc + headers, nvrtc, cublas/cublasLt, cudart headers);
#   2. a CUDA root (target/cuda-root) that dfdx's and cudarc's build scripts
#      accept: include/cuda.h, bin/nvcc, lib64/lib{nvrtc,cublas,cublasLt}.so
#      and lib64/stubs/libcuda.so (a generated link-time stub: the driver
#      library is not on PyPI; the GPU machine's own libcuda.so.1 is used at
#      run time), plus a fake `nvidia-smi` that reports compute capability 9.0;
#   3. `cargo test --no-run --release --features cuda` (and the EXAMPLES), with
#      every path that dfdx bakes into the binaries (CUDA_INCLUDE_DIR, OUT_DIR,
#      CARGO_MANIFEST_DIR) under one fixed prefix, $FLAXEN_CUDA_PREFIX
#      (default /tmp/flaxen-cuda), so the run script can recreate them there;
#   4. target/cuda-bundle: stripped binaries, the .cuh headers and CUDA headers
#      that dfdx's run-time nvrtc kernels include, a manifest and run.sh.
#
# Environment knobs (all optional):
#   FEATURES            cargo features (default: cuda)
#   CUDA_COMPUTE_CAP    target arch, default 90 (H100/H200)
#   TEST_ARGS           extra args for `cargo test --no-run` (default: --workspace)
#   EXAMPLES            more example names to build into the bundle (besides
#                       those scripts/cuda/examples.run runs)
#   SKIP_TESTS          regex over "KIND-TARGET" (lib-flaxen_runtime, test-scan, ...):
#                       test binaries not to bundle (default: ^test-ui$, trybuild needs cargo)
#   FLAXEN_CUDA_PREFIX  prefix baked into the binaries (default /tmp/flaxen-cuda)
#   CARGO_BUILD_JOBS    passed to cargo (default 1; the build runs under nice)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

FEATURES=${FEATURES:-cuda}
CAP=${CUDA_COMPUTE_CAP:-90}
TEST_ARGS=${TEST_ARGS:---workspace}
EXAMPLES=${EXAMPLES:-}
SKIP_TESTS=${SKIP_TESTS-^test-ui$}
PREFIX=${FLAXEN_CUDA_PREFIX:-/tmp/flaxen-cuda}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}

# CUDA 13.0 (the oldest 13.x): nvcc 13.0 writes PTX ISA 9.0, which every
# CUDA 13 driver loads; the libraries are linked by soname (*.so.13), so the
# GPU machine's own 13.x libraries satisfy them.
PIP_PKGS=(
  "nvidia-cuda-nvcc==13.0.88"
  "nvidia-nvvm==13.0.88"
  "nvidia-cuda-crt==13.0.88"
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-cuda-nvrtc==13.0.88"
  "nvidia-cublas==13.0.2.14"
  "nvidia-cuda-cccl==13.0.85"
)

VENV=$ROOT/target/cuda-venv
CROOT=$ROOT/target/cuda-root
TDIR=$ROOT/target/cuda-target
BUNDLE=$ROOT/target/cuda-bundle

say() { printf '==> %s\n' "$*" >&2; }

# ---------------------------------------------------------------- 1. toolkit
stamp="$VENV/.flaxen-pkgs"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${PIP_PKGS[*]}" ]; then
  say "venv $VENV: pip install ${PIP_PKGS[*]}"
  python3 -m venv "$VENV"
  nice -n 19 "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PIP_PKGS[@]}"
  echo "${PIP_PKGS[*]}" > "$stamp"
fi
CU=$("$VENV/bin/python" -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
[ -x "$CU/bin/nvcc" ] && [ -f "$CU/include/cuda.h" ] || { echo "no nvcc/cuda.h under $CU" >&2; exit 1; }

# ---------------------------------------------------------------- 2. CUDA root
say "CUDA root $CROOT"
rm -rf "$CROOT"
mkdir -p "$CROOT/lib64/stubs" "$CROOT/fake-bin"
ln -s "$CU/bin" "$CROOT/bin"
ln -s "$CU/include" "$CROOT/include"
ln -s "$CU/nvvm" "$CROOT/nvvm"
for l in nvrtc cublas cublasLt; do
  ln -s "$CU/lib/lib$l.so.13" "$CROOT/lib64/lib$l.so"
done

# libcuda.so stub: every driver entry point cudarc declares, each returning
# CUDA_ERROR_STUB_LIBRARY (34), with the real library's soname.
CUDARC_DIR=$(cargo metadata --format-version 1 --features "$FEATURES" 2>/dev/null |
  python3 -c 'import json,sys,os; m=json.load(sys.stdin); print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"]=="cudarc"))')
grep -ohE 'pub fn cu[A-Za-z0-9_]+' "$CUDARC_DIR/src/driver/sys.rs" | sed 's/^pub fn //' | sort -u |
  awk '{ print "int " $1 "(void) { return 34; }" }' > "$CROOT/lib64/stubs/libcuda_stub.c"
gcc -shared -fPIC -O0 -Wl,-soname,libcuda.so.1 -o "$CROOT/lib64/stubs/libcuda.so" "$CROOT/lib64/stubs/libcuda_stub.c"

# dfdx's build script asks nvidia-smi for the compute capability before it
# looks at $CUDA_COMPUTE_CAP, so it needs one that answers.
cat > "$CROOT/fake-bin/nvidia-smi" <<SMI
#!/bin/sh
# stand-in for dfdx's build script: answers --query-gpu=compute_cap only
printf 'compute_cap\n%s.%s\n' "${CAP%?}" "${CAP#"${CAP%?}"}"
SMI
chmod +x "$CROOT/fake-bin/nvidia-smi"

# ---------------------------------------------------------------- 3. build
# One prefix holds every path the binaries remember:
#   $PREFIX/src    -> this worktree      (CARGO_MANIFEST_DIR of the crates)
#   $PREFIX/root   -> target/cuda-root   (CUDA_INCLUDE_DIR = $PREFIX/root/include)
#   $PREFIX/target -> target/cuda-target (dfdx's OUT_DIR with its .cuh files)
mkdir -p "$PREFIX" "$TDIR"
ln -sfn "$ROOT" "$PREFIX/src"
ln -sfn "$CROOT" "$PREFIX/root"
ln -sfn "$TDIR" "$PREFIX/target"

export CUDA_ROOT=$PREFIX/root CUDA_PATH=$PREFIX/root
unset CUDA_TOOLKIT_ROOT_DIR CUDNN_LIB
export CUDA_COMPUTE_CAP=$CAP
export PATH=$PREFIX/root/bin:$CROOT/fake-bin:$PATH
export CARGO_TARGET_DIR=$PREFIX/target
MANIFEST=$PREFIX/src/Cargo.toml

json=$TDIR/flaxen-cuda-build.json
say "cargo test --no-run --release --features $FEATURES $TEST_ARGS"
# shellcheck disable=SC2086
nice -n 19 cargo test --manifest-path "$MANIFEST" --release --features "$FEATURES" $TEST_ARGS \
  --no-run --message-format=json-render-diagnostics > "$json"
# examples: those named in scripts/cuda/examples.run (lines "NAME ARGS...",
# run in that order on the GPU machine) that exist, plus $EXAMPLES
RUNS=$ROOT/scripts/cuda/examples.run
for ex in $(grep -vE '^\s*(#|$)' "$RUNS" 2>/dev/null | awk '{print $1}'); do
  if [ -f "$ROOT/examples/$ex.rs" ] || [ -f "$ROOT/examples/$ex/main.rs" ]; then
    case " $EXAMPLES " in *" $ex "*) ;; *) EXAMPLES="$EXAMPLES $ex" ;; esac
  else
    say "examples.run names $ex, which does not exist (yet): skipped"
  fi
done
for ex in $EXAMPLES; do
  say "cargo build --release --features $FEATURES --example $ex"
  nice -n 19 cargo build --manifest-path "$MANIFEST" --release --features "$FEATURES" \
    --example "$ex" --message-format=json-render-diagnostics >> "$json"
done

# ---------------------------------------------------------------- 4. bundle
say "bundle $BUNDLE"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/tests" "$BUNDLE/examples" "$BUNDLE/cuh" "$BUNDLE/include"
python3 - "$json" "$BUNDLE" "$SKIP_TESTS" <<'PY'
import json, os, re, shutil, sys
src, bundle, skip = sys.argv[1], sys.argv[2], re.compile(sys.argv[3])
seen = set()
for line in open(src):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if "example" in t["kind"] and not m["profile"]["test"]:
        dst = os.path.join(bundle, "examples", t["name"])
    else:
        kind = "lib" if t["kind"][0] in ("lib", "rlib", "proc-macro") else t["kind"][0]
        name = f'{kind}-{t["name"]}'
        if skip.pattern and skip.search(name):
            continue
        dst = os.path.join(bundle, "tests", name)
    if dst in seen:
        continue
    seen.add(dst)
    shutil.copy2(m["executable"], dst)
    print(dst)
PY
for f in "$BUNDLE"/tests/* "$BUNDLE"/examples/*; do
  [ -f "$f" ] && strip --strip-all "$f"
done

# dfdx compiles some kernels at run time with nvrtc, including .cuh files from
# its OUT_DIR and cuda_fp16.h from CUDA_INCLUDE_DIR.
dfdx_out=$(ls -d "$TDIR"/release/build/dfdx-*/out 2>/dev/null | while read -r d; do
  [ -f "$d/cuda_utils.cuh" ] && echo "$d"; done)
[ "$(echo "$dfdx_out" | wc -l)" = 1 ] || { echo "expected one dfdx OUT_DIR, got: $dfdx_out" >&2; exit 1; }
cp "$dfdx_out"/*.cuh "$BUNDLE/cuh/"
# fallback CUDA headers for nvrtc (the GPU machine's own are preferred)
(cd "$CU/include" && cp -r --parents cuda_fp16.h cuda_fp16.hpp cuda_bf16.h cuda_bf16.hpp \
  vector_types.h vector_functions.h vector_functions.hpp builtin_types.h driver_types.h \
  host_defines.h crt/host_defines.h device_types.h surface_types.h texture_types.h \
  library_types.h cuda_runtime_api.h nv "$BUNDLE/include/" 2>/dev/null) || true

cat > "$BUNDLE/manifest.env" <<MAN
# written by scripts/cuda/build.sh on $(hostname) at $(date -u +%FT%TZ)
FLAXEN_CUDA_PREFIX=$PREFIX
DFDX_OUT_DIR=${dfdx_out/#$TDIR/$PREFIX/target}
FEATURES=$FEATURES
CUDA_COMPUTE_CAP=$CAP
GIT_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo -dirty)
TOOLKIT="${PIP_PKGS[*]}"
MAN
# the runs of examples.run whose example got built
: > "$BUNDLE/examples.run"
if [ -f "$RUNS" ]; then
  grep -vE '^\s*(#|$)' "$RUNS" | while read -r ex args; do
    [ -f "$BUNDLE/examples/$ex" ] && echo "$ex $args" >> "$BUNDLE/examples.run"
  done
fi
cp "$ROOT/scripts/cuda/run.sh" "$BUNDLE/run.sh"
chmod +x "$BUNDLE/run.sh"

say "bundle contents"
(cd "$BUNDLE" && ls -l tests examples | sed 's/^/    /' >&2)
du -sh "$BUNDLE" >&2
size=$(du -sb "$BUNDLE" | cut -f1)
if [ "$size" -gt $((64 * 1024 * 1024)) ]; then
  echo "bundle is $size bytes: over the 64 MiB a device run can carry" >&2
  exit 1
fi
