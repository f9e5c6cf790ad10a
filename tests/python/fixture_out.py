"""What make_optax_traces.py, make_optax_schedules.py, make_flax_conv_pool.py
and make_flax_cnn_scan5.py share: their seeded float32 draws and how they
write a fixture.

Their fixtures are compact JSON (no spaces, no final newline), and each
array in them is {"shape": [...], "data": [flat row-major floats]}
(`flax_keys.arr`). A generator writes to tests/fixtures/ by default, or to
the directory given as its only argument, to compare a fresh run with the
committed file:

    python tests/python/make_optax_traces.py /tmp/out
    cmp /tmp/out/optax_traces.json tests/fixtures/optax_traces.json
"""

import json
import pathlib
import sys

import numpy as np

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"


def normal(seed, shape, scale=1.0):
    """Standard normal draws from `default_rng(seed)`, times `scale`, in
    float32: every input is drawn afresh from its own seed, so that a case
    does not depend on which cases ran before it."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def write(name, obj):
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURES
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
    print(f"wrote {path}")
