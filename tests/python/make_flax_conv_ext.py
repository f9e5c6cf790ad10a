"""Writes tests/fixtures/flax_conv_ext.json: Flax linen `Conv` with
`feature_group_count` and `kernel_dilation`, and `ConvTranspose`, forward
values and gradients in float64, for tests/layers_conv_ext.rs (Cpu) and
tests/cuda_layers.rs (Cuda).

    pip install -r tests/python/requirements.txt   # jax 0.10.2, flax 0.12.8
    python3 tests/python/make_flax_conv_ext.py > tests/fixtures/flax_conv_ext.json

Layout is flaxen's: images NCHW (Flax runs NHWC, so they are transposed in
and out), kernels OIHW (`weight`; Flax's `kernel` is HWIO and is transposed
(3, 2, 0, 1)). loss = sum(y * r); grad_* are d loss / d *.

`init` records, per layer kind, Flax's default kernel initialiser on a large
layer: the variance times the fan-in flaxen uses (Conv: (C / groups) * KH *
KW; ConvTranspose: C * KH * KW), which is 1 when they agree.
"""

import json

import jax

jax.config.update("jax_enable_x64", True)

import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(20260512)


def arr(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": [float(v) for v in a.reshape(-1)]}


def nhwc(x):
    return jnp.transpose(x, (0, 2, 3, 1))


def nchw(x):
    return jnp.transpose(x, (0, 3, 1, 2))


def case(name, layer, x_shape):
    x = rng.standard_normal(x_shape)
    params = layer.init(jax.random.key(0), nhwc(jnp.asarray(x)))["params"]
    shapes = {k: list(v.shape) for k, v in params.items()}
    # Random parameters (a non-zero bias), so every gradient is exercised.
    params = {k: jnp.asarray(rng.standard_normal(v.shape)) for k, v in params.items()}
    y = nchw(layer.apply({"params": params}, nhwc(jnp.asarray(x))))
    r = rng.standard_normal(y.shape)

    def loss(x, p):
        return jnp.sum(nchw(layer.apply({"params": p}, nhwc(x))) * r)

    gx, gp = jax.grad(loss, argnums=(0, 1))(jnp.asarray(x), params)
    oihw = (3, 2, 0, 1)
    out = {
        "name": name,
        "flax_param_shapes": shapes,
        "x": arr(x),
        "weight": arr(jnp.transpose(params["kernel"], oihw)),
        "y": arr(y),
        "r": arr(r),
        "grad_x": arr(gx),
        "grad_weight": arr(jnp.transpose(gp["kernel"], oihw)),
    }
    if "bias" in params:
        out["bias"] = arr(params["bias"])
        out["grad_bias"] = arr(gp["bias"])
    return out


def init_var_times_fan_in(layer, c, fan_in):
    x = jnp.zeros((1, 8, 8, c))
    kernel = layer.init(jax.random.key(1), x)["params"]["kernel"]
    return float(jnp.var(kernel) * fan_in)


conv = [
    case("grouped", nn.Conv(6, (3, 3), feature_group_count=2), (2, 4, 5, 6)),
    case(
        "depthwise",
        nn.Conv(
            6,
            (3, 2),
            strides=(2, 1),
            padding="VALID",
            feature_group_count=3,
            use_bias=False,
        ),
        (2, 3, 7, 5),
    ),
    case("dilated", nn.Conv(3, (3, 3), kernel_dilation=(2, 1)), (2, 2, 6, 5)),
    case(
        "depthwise_dilated_explicit",
        nn.Conv(
            4,
            (3, 3),
            strides=2,
            padding=((2, 1), (0, 2)),
            kernel_dilation=2,
            feature_group_count=4,
        ),
        (2, 4, 8, 7),
    ),
]

transpose = [
    case("same_s2", nn.ConvTranspose(2, (3, 3), strides=(2, 2)), (2, 3, 4, 5)),
    case(
        "valid_s2",
        nn.ConvTranspose(3, (3, 2), strides=(2, 2), padding="VALID"),
        (2, 2, 3, 4),
    ),
    case(
        "valid_s3_no_bias",
        nn.ConvTranspose(2, (2, 2), strides=(3, 3), padding="VALID", use_bias=False),
        (2, 2, 3, 3),
    ),
    case(
        "explicit",
        nn.ConvTranspose(3, (3, 2), strides=(2, 1), padding=((1, 2), (0, 1))),
        (2, 2, 4, 3),
    ),
    case(
        "dilated_same",
        nn.ConvTranspose(2, (2, 2), strides=(2, 2), kernel_dilation=(2, 2)),
        (2, 2, 3, 3),
    ),
]

init = {
    "conv_grouped": init_var_times_fan_in(
        nn.Conv(256, (3, 3), feature_group_count=4), 16, 4 * 9
    ),
    "conv_transpose": init_var_times_fan_in(nn.ConvTranspose(256, (3, 3)), 16, 16 * 9),
}

print(json.dumps({"conv": conv, "transpose": transpose, "init": init}))
