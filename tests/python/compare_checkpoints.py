"""Exit 0 iff two flaxen checkpoints hold the same tensors, bit for bit.

Used by .ci/run to check that the `train` example resumes exactly: a run cut
in two with --max-steps/--resume must end where the uncut run ends.
"""
import sys

import numpy as np
from safetensors.numpy import load_file

a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit(f"different keys: {sorted(set(a) ^ set(b))}")
bad = [k for k in sorted(a) if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape
       or a[k].tobytes() != b[k].tobytes()]
if bad:
    sys.exit(f"{len(bad)} tensors differ, first: {bad[0]}")
print(f"{len(a)} tensors identical")
