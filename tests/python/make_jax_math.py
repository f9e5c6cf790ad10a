"""Writes tests/fixtures/jax_math.json, read by tests/compact_math.rs: the
elementwise maths of the model language against JAX, in float64.

For each op, on x of shape [4, 6] (positive values in [0.3, 3) where the
op needs them: log, sqrt, rsqrt, pow with a fractional exponent; values of
both signs, none within 0.05 of 0, elsewhere): "y" = op(x) and "grad" =
d sum(op(x) * w) / dx, with w a fixed standard normal [4, 6].

    /tmp/venv/bin/python tests/python/make_jax_math.py [OUTDIR]

"sinusoidal": the fixed position table of Flax's lm1b example
(`sinusoidal_init(max_len=16)(None, (1, 16, f), None)`, written here from
its definition: float64 NumPy maths stored as float32), for f = 6 and 7,
its first 5 rows.

jax 0.10.2 (Python 3.11), with jax_enable_x64.
"""

import json
import os

os.environ["JAX_ENABLE_X64"] = "1"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from fixture_out import out_dir  # noqa: E402
from flax_keys import arr  # noqa: E402

# name: (function, whether its input must be positive)
OPS = {
    "exp": (jnp.exp, False),
    "log": (jnp.log, True),
    "sqrt": (jnp.sqrt, True),
    "rsqrt": (jax.lax.rsqrt, True),
    "sin": (jnp.sin, False),
    "cos": (jnp.cos, False),
    "abs": (jnp.abs, False),
    "square": (jnp.square, False),
    "pow_2_5": (lambda x: jnp.power(x, 2.5), True),
    "pow_3": (lambda x: jnp.power(x, 3.0), False),
    "clip": (lambda x: jnp.clip(x, -0.5, 0.8), False),
    "stop_gradient": (jax.lax.stop_gradient, False),
}


def sinusoidal_table(max_len, d, min_scale=1.0, max_scale=10000.0):
    """lm1b's `sinusoidal_init`: sines of the positions times geometric
    frequencies in the first half of the features, cosines in the second,
    an odd last feature 0; float64 maths, a float32 table."""
    pe = np.zeros((max_len, d), dtype=np.float32)
    position = np.arange(0, max_len)[:, np.newaxis]
    half = d // 2
    scale_factor = -np.log(max_scale / min_scale) / (half - 1)
    div_term = min_scale * np.exp(np.arange(0, half) * scale_factor)
    pe[:, :half] = np.sin(position * div_term)
    pe[:, half:2 * half] = np.cos(position * div_term)
    return pe


def main():
    out = out_dir()
    rng = np.random.default_rng(20261203)
    positive = rng.uniform(0.3, 3.0, (4, 6))
    mixed = rng.uniform(0.05, 2.5, (4, 6)) * rng.choice([-1.0, 1.0], (4, 6))
    w = rng.standard_normal((4, 6))
    cases = {}
    for name, (f, needs_positive) in OPS.items():
        x = positive if needs_positive else mixed
        y = f(jnp.asarray(x))
        g = jax.grad(lambda x: jnp.sum(f(x) * w))(jnp.asarray(x))
        assert y.dtype == jnp.float64
        cases[name] = {"x": arr(x), "y": arr(y), "grad": arr(g)}
    tables = {str(d): arr(sinusoidal_table(16, d)[:5]) for d in (6, 7)}
    with open(out / "jax_math.json", "w") as f:
        json.dump({"w": arr(w), "cases": cases, "sinusoidal": tables}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
