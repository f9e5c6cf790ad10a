"""Writes tests/fixtures/flax_norm_act.json: Flax linen BatchNorm (training
and inference), LayerNorm, RMSNorm, GroupNorm, SelfAttention and the
activations that `#[compact]` offers,
forward values and gradients, in float64, for tests/layers_norm_act.rs.

    pip install -r tests/python/requirements.txt   # jax 0.10.2, flax 0.12.8
    python3 tests/python/make_flax_norm_act.py > tests/fixtures/flax_norm_act.json

Layout is flaxen's (NCHW); Flax runs NHWC, so images are transposed in and
out. loss = sum(y * r); grad_* are d loss / d *.
"""

import json

import jax

jax.config.update("jax_enable_x64", True)

import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(20261129)


def arr(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": [float(v) for v in a.reshape(-1)]}


def normal(*shape, scale=1.0, shift=0.0):
    return rng.standard_normal(shape) * scale + shift


def to_nhwc(x):
    return jnp.transpose(x, (0, 2, 3, 1)) if x.ndim == 4 else x


def to_nchw(x):
    return jnp.transpose(x, (0, 3, 1, 2)) if x.ndim == 4 else x


def batch_norm_case(x_shape, momentum, epsilon):
    c = x_shape[1]
    x = normal(*x_shape, scale=2.0, shift=0.5)
    r = normal(*x_shape)
    scale, bias = normal(c, scale=0.5, shift=1.0), normal(c)
    mean0, var0 = normal(c), rng.uniform(0.5, 2.0, c)
    layer = nn.BatchNorm(momentum=momentum, epsilon=epsilon)
    params = {"scale": jnp.asarray(scale), "bias": jnp.asarray(bias)}
    stats = {"mean": jnp.asarray(mean0), "var": jnp.asarray(var0)}

    def run(train):
        def loss(x, p):
            y, upd = layer.apply(
                {"params": p, "batch_stats": stats},
                to_nhwc(x),
                use_running_average=not train,
                mutable=["batch_stats"],
            )
            y = to_nchw(y)
            return jnp.sum(y * r), (y, upd)

        (_, (y, upd)), (gx, gp) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
            jnp.asarray(x), params
        )
        new = upd["batch_stats"]
        return {
            "y": arr(y),
            "running_mean": arr(new["mean"]),
            "running_var": arr(new["var"]),
            "grad_x": arr(gx),
            "grad_scale": arr(gp["scale"]),
            "grad_bias": arr(gp["bias"]),
        }

    return {
        "layer": f"BatchNorm(momentum={momentum}, epsilon={epsilon})",
        "x": arr(x),
        "r": arr(r),
        "scale": arr(scale),
        "bias": arr(bias),
        "running_mean": arr(mean0),
        "running_var": arr(var0),
        "train": run(True),
        "eval": run(False),
    }


def layer_norm_case(x_shape, epsilon):
    f = x_shape[-1]
    x = normal(*x_shape, scale=3.0, shift=-1.0)
    r = normal(*x_shape)
    scale, bias = normal(f, scale=0.5, shift=1.0), normal(f)
    layer = nn.LayerNorm(epsilon=epsilon)
    params = {"scale": jnp.asarray(scale), "bias": jnp.asarray(bias)}

    def loss(x, p):
        y = layer.apply({"params": p}, x)
        return jnp.sum(y * r), y

    (_, y), (gx, gp) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        jnp.asarray(x), params
    )
    return {
        "layer": f"LayerNorm(epsilon={epsilon})",
        "x": arr(x),
        "r": arr(r),
        "scale": arr(scale),
        "bias": arr(bias),
        "y": arr(y),
        "grad_x": arr(gx),
        "grad_scale": arr(gp["scale"]),
        "grad_bias": arr(gp["bias"]),
    }


def scale_bias_norm_case(layer, label, x_shape, channels, with_bias=True):
    """A norm with a per-channel `scale` (and `bias`): y and the gradients.
    Images are NCHW here and NHWC for Flax."""
    x = normal(*x_shape, scale=3.0, shift=-1.0)
    r = normal(*x_shape)
    params = {"scale": jnp.asarray(normal(channels, scale=0.5, shift=1.0))}
    if with_bias:
        params["bias"] = jnp.asarray(normal(channels))

    def loss(x, p):
        y = to_nchw(layer.apply({"params": p}, to_nhwc(x)))
        return jnp.sum(y * r), y

    (_, y), (gx, gp) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        jnp.asarray(x), params
    )
    case = {"layer": label, "x": arr(x), "r": arr(r), "scale": arr(params["scale"]),
            "y": arr(y), "grad_x": arr(gx), "grad_scale": arr(gp["scale"])}
    if with_bias:
        case["bias"] = arr(params["bias"])
        case["grad_bias"] = arr(gp["bias"])
    return case


def self_attention_case(x_shape, num_heads, qkv_features, out_features):
    """nn.SelfAttention: y and the gradients. Kernels are stored as flaxen's
    (out, in) weights: Flax's (in, heads, head_dim) kernels flattened to
    (in, qkv) and transposed; `out`'s (heads, head_dim, out) to (qkv, out)."""
    b, s_, f = x_shape
    x = normal(*x_shape)
    r = normal(b, s_, out_features)
    layer = nn.SelfAttention(
        num_heads=num_heads, qkv_features=qkv_features, out_features=out_features
    )
    dh = qkv_features // num_heads

    def proj(fan_in, fan_out):
        return {
            "kernel": jnp.asarray(normal(fan_in, fan_out, scale=fan_in**-0.5)),
            "bias": jnp.asarray(normal(fan_out, scale=0.1)),
        }

    flat = {n: proj(f, qkv_features) for n in ("query", "key", "value")}
    flat["out"] = proj(qkv_features, out_features)
    params = {
        n: {
            "kernel": p["kernel"].reshape(f, num_heads, dh),
            "bias": p["bias"].reshape(num_heads, dh),
        }
        for n, p in flat.items()
        if n != "out"
    }
    params["out"] = {
        "kernel": flat["out"]["kernel"].reshape(num_heads, dh, out_features),
        "bias": flat["out"]["bias"],
    }

    def loss(x, p):
        y = layer.apply({"params": p}, x, deterministic=True)
        return jnp.sum(y * r), y

    (_, y), (gx, gp) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        jnp.asarray(x), params
    )
    case = {
        "layer": f"SelfAttention(num_heads={num_heads}, qkv_features={qkv_features}, "
        f"out_features={out_features})",
        "x": arr(x),
        "r": arr(r),
        "y": arr(y),
        "grad_x": arr(gx),
    }
    for n in ("query", "key", "value", "out"):
        fan_in = f if n != "out" else qkv_features
        case[f"{n}_weight"] = arr(jnp.transpose(flat[n]["kernel"]))
        case[f"{n}_bias"] = arr(flat[n]["bias"])
        case[f"grad_{n}_weight"] = arr(jnp.transpose(gp[n]["kernel"].reshape(fan_in, -1)))
        case[f"grad_{n}_bias"] = arr(gp[n]["bias"].reshape(-1))
    return case


# name: (function, input shape with the batch axis first, input scale)
ACTIVATIONS = {
    "relu": (nn.relu, (4, 9), 2.5),
    "gelu": (nn.gelu, (4, 9), 2.5),  # approximate=True, Flax's default
    "gelu(approximate=False)": (lambda x: nn.gelu(x, approximate=False), (4, 9), 2.5),
    "silu": (nn.silu, (4, 9), 2.5),
    "sigmoid": (nn.sigmoid, (4, 9), 2.5),
    "tanh": (nn.tanh, (4, 9), 2.5),
    "softmax": (nn.softmax, (4, 9), 2.5),
    "log_softmax": (nn.log_softmax, (4, 9), 2.5),
    "softmax(axis=-2)": (lambda x: nn.softmax(x, axis=-2), (2, 4, 5), 2.5),
    "log_softmax(axis=-2)": (lambda x: nn.log_softmax(x, axis=-2), (2, 4, 5), 2.5),
    "swish": (nn.swish, (4, 9), 2.5),
    "leaky_relu": (nn.leaky_relu, (4, 9), 2.5),
    "leaky_relu(negative_slope=0.2)": (lambda x: nn.leaky_relu(x, negative_slope=0.2), (4, 9), 2.5),
    "elu": (nn.elu, (4, 9), 2.5),
    "elu(alpha=0.5)": (lambda x: nn.elu(x, alpha=0.5), (4, 9), 2.5),
    "selu": (nn.selu, (4, 9), 2.5),
    # Wide inputs, so that the tails (exp underflow, clipping) are exercised.
    "softplus": (nn.softplus, (4, 9), 12.0),
    "log_sigmoid": (nn.log_sigmoid, (4, 9), 12.0),
    "relu6": (nn.relu6, (4, 9), 5.0),
    "hard_tanh": (nn.hard_tanh, (4, 9), 2.0),
    "hard_sigmoid": (nn.hard_sigmoid, (4, 9), 4.0),
    "hard_silu": (nn.hard_silu, (4, 9), 4.0),
}


def activation_case(name):
    f, shape, scale = ACTIVATIONS[name]
    x = normal(*shape, scale=scale)
    r = normal(*shape)
    y, vjp = jax.vjp(f, jnp.asarray(x))
    (gx,) = vjp(jnp.asarray(r))
    return {"op": name, "x": arr(x), "r": arr(r), "y": arr(y), "grad_x": arr(gx)}


out = {
    "about": (
        f"flax {flax.__version__} / jax {jax.__version__} linen BatchNorm, LayerNorm and "
        "activations, float64, made by tests/python/make_flax_norm_act.py. Layout NCHW "
        "(transposed to NHWC for Flax). loss = sum(y * r); grad_* are d loss / d *. "
        "BatchNorm 'train' is use_running_average=False with mutable batch_stats "
        "(running_* are the updated statistics), 'eval' is use_running_average=True."
    ),
    "batch_norm": [
        batch_norm_case((6, 5), 0.9, 1e-5),
        batch_norm_case((3, 4, 5, 6), 0.99, 1e-3),
    ],
    "layer_norm": [
        layer_norm_case((4, 7), 1e-6),
        layer_norm_case((3, 4, 7), 1e-2),
    ],
    "activations": [activation_case(n) for n in ACTIVATIONS],
    "rms_norm": [
        scale_bias_norm_case(nn.RMSNorm(), "RMSNorm()", (4, 7), 7, with_bias=False),
        scale_bias_norm_case(
            nn.RMSNorm(epsilon=1e-2), "RMSNorm(epsilon=0.01)", (3, 4, 7), 7, with_bias=False
        ),
    ],
    "self_attention": [
        self_attention_case((2, 5, 4), num_heads=2, qkv_features=8, out_features=6),
        self_attention_case((3, 4, 6), num_heads=3, qkv_features=6, out_features=6),
    ],
    "group_norm": [
        scale_bias_norm_case(nn.GroupNorm(num_groups=4), "GroupNorm(num_groups=4)", (2, 8, 3, 4), 8),
        scale_bias_norm_case(
            nn.GroupNorm(num_groups=None, group_size=3, epsilon=1e-3),
            "GroupNorm(group_size=3, epsilon=0.001)",
            (2, 6, 3, 3),
            6,
        ),
    ],
}
print(json.dumps(out))
