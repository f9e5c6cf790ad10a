#!/usr/bin/env python3
"""Preflight for run.sh (and dryrun.sh): compile, with this machine's nvrtc,
the kernels that dfdx compiles at run time, the way it compiles them:
`--include-path=` the paths baked into the binaries, `--gpu-architecture=`
the baked arch. dfdx keeps those kernels as string templates in its source
($T, $Ty, $Src, $Dst for the element types); build.sh copies them to the
bundle's nvrtc/ folder.

    python3 nvrtc_check.py ARCH KERNEL_DIR TYPES INCLUDE_DIR...
      ARCH        like sm_90
      KERNEL_DIR  folder of *.cu templates (may be empty)
      TYPES       comma-separated CUDA types, e.g. float,double,__half

Loads libnvrtc.so.13 through LD_LIBRARY_PATH. Exit 0 when all compile."""
import ctypes
import itertools
import os
import re
import sys

PROBE = '''#include "cuda_fp16.h"
#include "cuda_utils.cuh"
extern "C" __global__ void k(const size_t n, const __half *x, float *y) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { y[i] = __half2float(x[i]) + 1.0f; }
}
'''


def compile_one(lib, src, name, opts):
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None):
        return 1, "nvrtcCreateProgram failed"
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode(errors="replace").strip()


def main():
    arch, kdir, types, incs = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4:]
    lib = ctypes.CDLL("libnvrtc.so.13")
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    opts = [f"--include-path={p}" for p in incs] + [f"--gpu-architecture={arch}"]
    jobs = [("probe(cuda_fp16.h+cuda_utils.cuh)", PROBE)]
    for f in sorted(os.listdir(kdir)) if os.path.isdir(kdir) else []:
        if not f.endswith(".cu"):
            continue
        tmpl = open(os.path.join(kdir, f)).read()
        holes = sorted(set(re.findall(r"\$[A-Za-z]+", tmpl)))
        for combo in itertools.product(types, repeat=len(holes)):
            if len(holes) == 2 and combo[0] == combo[1]:
                continue  # dfdx does not convert a type to itself
            src = tmpl
            for h, t in sorted(zip(holes, combo), key=lambda p: -len(p[0])):
                src = src.replace(h, t)
            jobs.append((f"{f[:-3]}[{','.join(combo)}]", src))
    bad = 0
    for name, src in jobs:
        rc, log = compile_one(lib, src, name + ".cu", opts)
        if rc:
            bad += 1
            print(f"  FAILED {name} (nvrtcResult {rc})\n{log[:3000]}")
    print(f"nvrtc {major.value}.{minor.value} for {arch}, include {incs}: "
          f"{len(jobs) - bad} of {len(jobs)} kernels compiled: {'ok' if not bad else 'FAILED'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
