#!/usr/bin/env python3
"""Preflight for run.sh: can this machine's nvrtc compile a kernel the way
dfdx's run-time kernels are compiled (cuda_fp16.h + dfdx's cuda_utils.cuh,
found through the include paths baked into the binaries)?

    python3 nvrtc_check.py ARCH INCLUDE_DIR...    (ARCH like sm_90)

Loads libnvrtc.so.13 through LD_LIBRARY_PATH. Exit 0 when it compiles."""
import ctypes
import sys

SRC = b'''#include "cuda_fp16.h"
#include "cuda_utils.cuh"
extern "C" __global__ void k(const size_t n, const __half *x, float *y) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { y[i] = __half2float(x[i]) + 1.0f; }
}
'''


def main():
    arch, incs = sys.argv[1], sys.argv[2:]
    lib = ctypes.CDLL("libnvrtc.so.13")
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), SRC, b"check.cu", 0, None, None):
        print("nvrtcCreateProgram failed")
        return 1
    opts = [b"--gpu-architecture=" + arch.encode()]
    opts += [b"--include-path=" + p.encode() for p in incs]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    verdict = "ok" if rc == 0 else f"FAILED (nvrtcResult {rc})"
    print(f"nvrtc {major.value}.{minor.value} compile for {arch} with {incs}: {verdict}")
    if log.value.strip():
        print(log.value.decode(errors="replace")[:4000])
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
