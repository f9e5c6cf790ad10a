"""Writes tests/fixtures/jax_builtins.json: JAX's values and gradients of
the builtin maths of tests/compact_builtins.rs, in float64.

    /tmp/venv/bin/python tests/python/make_jax_builtins.py [OUTDIR]

jax 0.10.2 (Python 3.11), with jax_enable_x64. Every case is a function
of per-example inputs (batch 3) written here as its Flax user writes it:

- "extrema": `jnp.maximum(x, y) + jnp.minimum(x, 0.25) - jnp.maximum(0.5 * y, x[:, :1])`
  for x, y of shape (3, 5) (the last term broadcasts a (3, 1) column);
- "select": `jnp.where(m, x, y) + jnp.where(m, 2.0, y) + jnp.where(m, x, -1.0)`
  for x, y of shape (3, 2, 5) and a fixed boolean m of that shape ("mask");
- "timestep": the DDPM U-Net's `get_timestep_embedding(t, 16)` for t of
  shape (3,): `half = 8; e = log(10000) / (half - 1); e = exp(arange(half)
  * -e); e = t[:, None] * e[None, :]; concatenate([sin(e), cos(e)], 1)`;
- "power": `x ** 3 + 2 ** 3 * x` (a tensor to a number, and a number to a
  number);
- "pad_slice": for x of shape (3, 2, 5): `jnp.pad(x, ((0, 0), (1, 2), (2,
  0)), constant_values=0.5) * 2.0` then
  `jax.lax.slice_in_dim(.., 1, 6, axis=2)` (per example: `[2, 5]` padded
  to `[5, 7]`, then columns 1..6);
- "dot_attention": `flax.linen.dot_product_attention(q, k, v,
  mask=attention_mask[:, None])` for q (3, 4, 2, 3), k (3, 5, 2, 3), v (3,
  5, 2, 6) and a fixed boolean "attention_mask" (3, 4, 5) whose second
  example's last query sees no key (so it attends uniformly, as Flax's
  `finfo.min` logits give).

Each case holds the inputs, the output `y` and the gradient of
`sum(y * w)` (w a fixed normal array of y's shape) with respect to each
float input. No value of x equals y (ties have a subgradient JAX splits
in half).
"""

import json
import math
import os

os.environ["JAX_ENABLE_X64"] = "1"

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from fixture_out import out_dir  # noqa: E402
from flax_keys import arr  # noqa: E402


def timestep(t, dim=16, max_period=10000):
    half = dim // 2
    e = math.log(max_period) / (half - 1)
    e = jnp.exp(jnp.arange(half) * -e)
    e = t[:, None] * e[None, :]
    return jnp.concatenate([jnp.sin(e), jnp.cos(e)], axis=1)


def main():
    out = out_dir()
    rng = np.random.default_rng(20261203)
    x = rng.normal(size=(3, 5))
    y = rng.normal(size=(3, 5))
    xs = rng.normal(size=(3, 2, 5))
    ys = rng.normal(size=(3, 2, 5))
    m = rng.random(size=(3, 2, 5)) > 0.5
    t = np.array([0.0, 3.5, 250.0])
    cases = {}

    def case(name, f, inputs):
        val = f(*inputs)
        w = rng.normal(size=val.shape)
        grads = jax.grad(lambda *a: jnp.sum(f(*a) * w), argnums=tuple(range(len(inputs))))(*inputs)
        cases[name] = {
            "inputs": [arr(i) for i in inputs],
            "y": arr(val),
            "w": arr(w),
            "grads": [arr(g) for g in grads],
        }

    case("extrema", lambda x, y: jnp.maximum(x, y) + jnp.minimum(x, 0.25) - jnp.maximum(0.5 * y, x[:, :1]), [x, y])
    case("select", lambda x, y: jnp.where(m, x, y) + jnp.where(m, 2.0, y) + jnp.where(m, x, -1.0), [xs, ys])
    case("timestep", timestep, [t])
    case("power", lambda x: x ** 3 + 2 ** 3 * x, [x])
    case(
        "pad_slice",
        lambda x: jax.lax.slice_in_dim(jnp.pad(x, ((0, 0), (1, 2), (2, 0)), constant_values=0.5) * 2.0, 1, 6, axis=2),
        [xs],
    )
    q = rng.normal(size=(3, 4, 2, 3))
    k = rng.normal(size=(3, 5, 2, 3))
    v = rng.normal(size=(3, 5, 2, 6))
    am = rng.random(size=(3, 4, 5)) > 0.3
    am[1, 3, :] = False
    case("dot_attention", lambda q, k, v: nn.dot_product_attention(q, k, v, mask=am[:, None]), [q, k, v])
    with open(out / "jax_builtins.json", "w") as f:
        json.dump({
            "mask": [bool(v) for v in m.reshape(-1)],
            "attention_mask": [bool(v) for v in am.reshape(-1)],
            "cases": cases,
        }, f)
        f.write("\n")


if __name__ == "__main__":
    main()
