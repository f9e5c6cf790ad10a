"""Exit 0 iff two flaxen checkpoints hold the same tensors, bit for bit.

Used by .ci/run to check that the `train` example resumes exactly: a run cut
in two with --max-steps/--resume must end where the uncut run ends.

With `--rtol R`, float tensors may differ by up to R times their largest
magnitude (integer tensors, such as the step and the data order, must still
be equal): a data-parallel run sums its gradients in another order than a
single process, so the two agree to rounding, not bit for bit.
"""
import argparse
import sys

import numpy as np
from safetensors.numpy import load_file

parser = argparse.ArgumentParser()
parser.add_argument("a")
parser.add_argument("b")
parser.add_argument("--rtol", type=float, default=None)
args = parser.parse_args()

a, b = load_file(args.a), load_file(args.b)
if sorted(a) != sorted(b):
    sys.exit(f"different keys: {sorted(set(a) ^ set(b))}")


def same(x, y):
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if args.rtol is None or not np.issubdtype(x.dtype, np.floating):
        return x.tobytes() == y.tobytes()
    x, y = x.astype(np.float64), y.astype(np.float64)
    scale = max(np.abs(y).max(initial=0.0), 1e-30)
    return np.abs(x - y).max(initial=0.0) <= args.rtol * scale


bad = [k for k in sorted(a) if not same(a[k], b[k])]
if bad:
    sys.exit(f"{len(bad)} tensors differ, first: {bad[0]}")
if args.rtol is None:
    print(f"{len(a)} tensors identical")
else:
    print(f"{len(a)} tensors equal within rtol {args.rtol}")
