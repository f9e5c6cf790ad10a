"""Reads a flaxen checkpoint with Python's own `safetensors` and prints a
JSON summary. Used by tests/checkpoint_python.rs; needs
`pip install safetensors numpy`."""
import json
import sys

from safetensors import safe_open
from safetensors.numpy import load_file

path = sys.argv[1]
tensors = load_file(path)
with safe_open(path, framework="numpy") as f:
    metadata = f.metadata()
print(json.dumps({
    "step": int(tensors["step"]),
    "metadata": metadata,
    "tensors": {
        k: {"dtype": str(v.dtype), "shape": list(v.shape), "sum": float(v.astype("float64").sum())}
        for k, v in tensors.items()
    },
}))
