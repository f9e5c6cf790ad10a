"""Writes tests/fixtures/flax_resize.json: `jax.image.resize` (what Flax
models call for upsampling, e.g. a U-Net decoder) with every method, up
and down, odd and non-square sizes, with and without `antialias`, forward
values and input gradients, in float64, for tests/layers_resize.rs.

    pip install -r tests/python/requirements.txt   # jax 0.10.2, flax 0.12.8
    python3 tests/python/make_flax_resize.py > tests/fixtures/flax_resize.json

Layout is flaxen's (NCHW); the resize runs NHWC as a Flax model does, so
images are transposed in and out. loss = sum(y * r); grad_x = d loss / d x.
"""

import json

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(20261212)


def arr(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": [float(v) for v in a.reshape(-1)]}


def case(name, method, hw, out_hw, antialias=True, b=2, c=3):
    x = rng.standard_normal((b, c) + hw)
    r = rng.standard_normal((b, c) + out_hw)

    def run(x):
        nhwc = jnp.transpose(x, (0, 2, 3, 1))
        y = jax.image.resize(nhwc, (b,) + out_hw + (c,), method, antialias=antialias)
        return jnp.transpose(y, (0, 3, 1, 2))

    y = run(jnp.asarray(x))
    grad = jax.grad(lambda x: jnp.sum(run(x) * r))(jnp.asarray(x))
    return {
        "name": name,
        "method": method,
        "antialias": antialias,
        "x": arr(x),
        "r": arr(r),
        "y": arr(y),
        "grad_x": arr(grad),
    }


cases = [
    case("nearest_up_x2", "nearest", (5, 7), (10, 14)),
    case("nearest_mixed", "nearest", (5, 7), (9, 4)),
    case("nearest_down_x3", "nearest", (9, 6), (3, 2)),
    case("nearest_up_odd", "nearest", (4, 5), (11, 13)),
    case("linear_up_x2", "linear", (3, 5), (6, 10)),
    case("linear_mixed", "bilinear", (5, 7), (9, 4)),
    case("linear_up_odd", "linear", (5, 7), (11, 15)),
    case("linear_down", "linear", (9, 11), (4, 5)),
    case("linear_down_no_antialias", "linear", (9, 11), (4, 5), antialias=False),
    case("linear_width_only", "linear", (5, 7), (5, 12)),
    case("cubic_mixed", "cubic", (5, 7), (9, 4)),
    case("cubic_down_up", "bicubic", (7, 5), (3, 11)),
    case("lanczos3_mixed", "lanczos3", (6, 7), (4, 13)),
    case("lanczos5_mixed", "lanczos5", (5, 9), (11, 4)),
]

print(json.dumps({"jax": jax.__version__, "cases": cases}))
