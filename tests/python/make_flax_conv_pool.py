"""Flax linen `Conv`, `avg_pool` and `max_pool`: forward values and
gradients in float32 for tests/layers_fixtures.rs (Cpu) and
tests/cuda_layers.rs (Cuda), through tests/common/conv_pool.rs.

Writes tests/fixtures/flax_conv_pool.json. Layout is flaxen's: images NCHW
(Flax runs NHWC, so they are transposed in and out), kernels OIHW (Flax's
`kernel` is HWIO). loss = sum(y * loss_weights_r); grad_* are d loss / d *.
Each case's inputs come from its own seeds (`seed`, `seed + 1`, ... in the
order they are drawn below).

Generated with Python 3, jax 0.10.2, jaxlib 0.10.2, flax 0.12.8, numpy
(see requirements.txt): `python tests/python/make_flax_conv_pool.py [OUTDIR]`.
"""

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from fixture_out import normal, write
from flax_keys import arr

jax.config.update("jax_enable_x64", False)


def nhwc(x):
    return jnp.transpose(x, (0, 2, 3, 1))


def nchw(x):
    return jnp.transpose(x, (0, 3, 1, 2))


def conv_case(seed, b, c, h, w, o, kh, kw, strides, padding):
    x = normal(seed, (b, c, h, w))
    k = normal(seed + 1, (o, c, kh, kw), 0.5)
    bias = normal(seed + 2, (o,), 0.1)
    conv = nn.Conv(features=o, kernel_size=(kh, kw), strides=strides, padding=padding)
    params = {"params": {"kernel": jnp.transpose(k, (2, 3, 1, 0)), "bias": bias}}
    y = conv.apply(params, nhwc(x))
    r = normal(seed + 3, y.shape)

    def loss(p, xn):
        return jnp.sum(conv.apply(p, xn) * r)

    gp, gx = jax.grad(loss, argnums=(0, 1))(params, nhwc(x))
    return {
        "layer": "Conv(features=%d, kernel_size=(%d, %d), strides=%s, padding=%r)"
        % (o, kh, kw, tuple(strides), padding),
        "x": arr(x),
        "kernel_oihw": arr(k),
        "bias": arr(bias),
        "y": arr(nchw(y)),
        "loss_weights_r": arr(nchw(r)),
        "grad_x": arr(nchw(gx)),
        "grad_kernel_oihw": arr(jnp.transpose(gp["params"]["kernel"], (3, 2, 0, 1))),
        "grad_bias": arr(gp["params"]["bias"]),
    }


def pool_case(seed, kind, b, c, h, w, window, strides, padding):
    x = normal(seed, (b, c, h, w))
    pool = {"avg": nn.avg_pool, "max": nn.max_pool}[kind]

    def fwd(xn):
        return pool(xn, window_shape=window, strides=strides, padding=padding)

    y = fwd(nhwc(x))
    # `seed + 3`, as for a conv case, so that `r` is drawn from the same
    # seed offset in both kinds of case.
    r = normal(seed + 3, y.shape)
    gx = jax.grad(lambda xn: jnp.sum(fwd(xn) * r))(nhwc(x))
    return {
        "layer": "%s_pool(window_shape=%s, strides=%s, padding=%r)"
        % (kind, tuple(window), tuple(strides), padding),
        "x": arr(x),
        "y": arr(nchw(y)),
        "loss_weights_r": arr(nchw(r)),
        "grad_x": arr(nchw(gx)),
    }


convs = [
    conv_case(1, 2, 3, 7, 6, 4, 3, 3, (1, 1), "SAME"),
    conv_case(2, 2, 3, 7, 6, 4, 3, 3, (1, 1), "VALID"),
    conv_case(3, 2, 3, 8, 9, 5, 3, 3, (2, 2), "SAME"),
    conv_case(4, 1, 2, 9, 9, 3, 5, 5, (2, 2), "VALID"),
    conv_case(5, 2, 1, 6, 5, 2, 2, 3, (1, 2), "SAME"),
    conv_case(6, 2, 4, 5, 5, 3, 1, 1, (1, 1), "SAME"),
]
pools = [
    pool_case(11, "avg", 2, 3, 6, 6, (2, 2), (2, 2), "VALID"),
    pool_case(12, "max", 2, 3, 6, 6, (2, 2), (2, 2), "VALID"),
    pool_case(13, "avg", 2, 2, 7, 7, (3, 3), (2, 2), "VALID"),
    pool_case(14, "max", 2, 2, 7, 5, (3, 3), (1, 1), "SAME"),
    pool_case(15, "avg", 1, 2, 5, 5, (2, 2), (1, 1), "VALID"),
]
about = (
    "flax %s linen Conv / avg_pool / max_pool forward and gradients. Layout NCHW, kernels OIHW. "
    "loss = sum(y * loss_weights_r); grad_* are d loss / d *." % flax.__version__
)
write("flax_conv_pool.json", {"about": about, "conv": convs, "pool": pools})
