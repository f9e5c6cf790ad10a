"""Writes tests/fixtures/flax_compact_v2.json: three Flax linen models written
as a Flax user writes them (loops over blocks, widths from module attributes,
`use_bias=False` convolutions, nested modules), with random parameters, in
float64, for tests/compact_v2_flax.rs, which runs the same models written in
flaxen's `#[compact]` syntax:

- `stage`: a ResNet stage (two basic blocks, the first with stride 2 and a
  1x1 projection shortcut), training (batch statistics, updated running
  statistics) and inference (the fixture's running statistics);
- `encoder`: two Transformer encoder blocks (LayerNorm, SelfAttention,
  Dense-gelu-Dense, residuals) and a final LayerNorm;
- `mlp`: Dense layers of widths hidden * (i + 1), then Dense(out).

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -r tests/python/requirements.txt
    /tmp/venv/bin/python tests/python/make_flax_compact_v2.py > tests/fixtures/flax_compact_v2.json

jax 0.10.2, jaxlib 0.10.2, flax 0.12.8, numpy 2.4.6 made the committed file
(Python 3.11).

Every tensor is stored in flaxen's layout under flaxen's checkpoint key:
modules are snake-cased (`Conv_0` -> `conv_0`, `EncoderBlock_1` ->
`encoder_block_1`, `SelfAttention_0` -> `self_attention_0`); Conv kernels
`(KH, KW, C, O)` become `weight` `(O, C, KH, KW)`; Dense kernels `(I, O)`
become `weight` `(O, I)`; BatchNorm keeps `scale` and `bias` and stores
`batch_stats` `mean`/`var` as `running_mean`/`running_var`; LayerNorm's
`scale`/`bias` are dfdx's `gamma`/`beta`; SelfAttention's `query`, `key`,
`value` kernels `(F, heads, head_dim)` are flattened to `(F, QKV)` and
transposed, `out`'s `(heads, head_dim, OUT)` to `(QKV, OUT)` and transposed,
their biases flattened. `flax_paths` maps every key back to Flax's path.
Images are NCHW (transposed to NHWC for Flax and back).

loss = sum(y * r); `grad_x` and `grads` are d loss / d x and d loss / d
every parameter (training mode for the stage); `num_params` counts Flax's
`params` (not `batch_stats`).
"""

import json

import jax

jax.config.update("jax_enable_x64", True)

import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax_keys import arr, by_key, count, flat, kind, paths, unflat  # noqa: E402

rng = np.random.default_rng(20260517)


def normal(*shape, scale=1.0, shift=0.0):
    # Rounded to 6 decimals, so that the inputs are stored exactly in few
    # characters (the outputs keep every digit).
    return np.round(rng.standard_normal(shape) * scale + shift, 6)


# ------------------------------------------------------------------ models


class Stage(nn.Module):
    features: int = 32
    blocks: int = 2
    strides: int = 2

    @nn.compact
    def __call__(self, x, train: bool = True):
        for i in range(self.blocks):
            s = self.strides if i == 0 else 1
            y = nn.Conv(self.features, (3, 3), strides=(s, s), use_bias=False)(x)
            y = nn.relu(nn.BatchNorm(use_running_average=not train)(y))
            y = nn.BatchNorm(use_running_average=not train)(
                nn.Conv(self.features, (3, 3), use_bias=False)(y)
            )
            r = x
            if s != 1 or x.shape[-1] != self.features:
                r = nn.BatchNorm(use_running_average=not train)(
                    nn.Conv(self.features, (1, 1), strides=(s, s), use_bias=False)(x)
                )
            x = nn.relu(r + y)
        return x


class EncoderBlock(nn.Module):
    num_heads: int = 4
    mlp_dim: int = 64

    @nn.compact
    def __call__(self, x):
        y = nn.LayerNorm()(x)
        y = nn.SelfAttention(num_heads=self.num_heads)(y)  # deterministic, no dropout
        x = x + y
        y = nn.LayerNorm()(x)
        y = nn.Dense(self.mlp_dim)(y)
        y = nn.gelu(y)
        y = nn.Dense(x.shape[-1])(y)
        return x + y


class Encoder(nn.Module):
    num_layers: int = 2

    @nn.compact
    def __call__(self, x):
        for _ in range(self.num_layers):
            x = EncoderBlock(num_heads=4, mlp_dim=64)(x)
        return nn.LayerNorm()(x)


class Mlp(nn.Module):
    hidden: int = 24
    depth: int = 3
    out: int = 10

    @nn.compact
    def __call__(self, x):
        for i in range(self.depth):
            x = nn.relu(nn.Dense(self.hidden * (i + 1))(x))
        return nn.Dense(self.out)(x)


def random_params(params):
    """Replaces every parameter by a random one of the same shape: kernels
    with variance ~1.3 / fan_in, scales around 1, biases of a few tenths, so
    that no term of the forward pass or the gradients is trivially 0 or 1."""
    out = {}
    for path, v in flat(params).items():
        owner, leaf = kind(path[-2]), path[-1]
        shape = v.shape
        if leaf == "kernel":
            fan_in = {"query": shape[0], "key": shape[0], "value": shape[0]}.get(
                owner, int(np.prod(shape[:-1]))
            )
            out[path] = normal(*shape, scale=1.15 / np.sqrt(fan_in))
        elif leaf == "scale":
            out[path] = normal(*shape, scale=0.3, shift=1.0)
        elif leaf == "bias":
            out[path] = normal(*shape, scale=0.3)
        else:
            raise ValueError(path)
    return unflat({p: jnp.asarray(v) for p, v in out.items()})


def random_batch_stats(stats):
    out = {}
    for path, v in flat(stats).items():
        if path[-1] == "mean":
            out[path] = jnp.asarray(normal(*v.shape, scale=0.4))
        else:
            out[path] = jnp.asarray(np.round(rng.uniform(0.5, 2.0, v.shape), 6))
    return unflat(out)


# ------------------------------------------------------------------- cases


def to_nhwc(x):
    return jnp.transpose(x, (0, 2, 3, 1))


def to_nchw(x):
    return jnp.transpose(x, (0, 3, 1, 2))


def stage_case():
    model = Stage()
    x = normal(3, 16, 8, 8, scale=1.5, shift=0.3)
    variables = model.init(jax.random.PRNGKey(0), to_nhwc(jnp.asarray(x)), train=False)
    params = random_params(variables["params"])
    stats = random_batch_stats(variables["batch_stats"])
    y_shape = model.apply({"params": params, "batch_stats": stats}, to_nhwc(x), train=False).shape
    r = normal(y_shape[0], y_shape[3], y_shape[1], y_shape[2])

    def loss(x, p):
        y, upd = model.apply(
            {"params": p, "batch_stats": stats}, to_nhwc(x), train=True, mutable=["batch_stats"]
        )
        y = to_nchw(y)
        return jnp.sum(y * r), (y, upd["batch_stats"])

    (_, (y, new_stats)), (gx, gp) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        jnp.asarray(x), params
    )
    y_eval = to_nchw(model.apply({"params": params, "batch_stats": stats}, to_nhwc(x), train=False))
    return {
        "model": "Stage(features=32, blocks=2, strides=2)",
        "x": arr(x),
        "r": arr(r),
        "params": by_key(flat(params)),
        "batch_stats": by_key(flat(stats)),
        "flax_paths": paths(params, stats),
        "num_params": count(params),
        "y": arr(y),
        "grad_x": arr(gx),
        "grads": by_key(flat(gp)),
        "batch_stats_after": by_key(flat(new_stats)),
        "eval_y": arr(y_eval),
    }


def plain_case(model, label, x):
    """A model without batch statistics: y and the gradients."""
    params = random_params(model.init(jax.random.PRNGKey(0), jnp.asarray(x))["params"])
    y_shape = model.apply({"params": params}, jnp.asarray(x)).shape
    r = normal(*y_shape)

    def loss(x, p):
        y = model.apply({"params": p}, x)
        return jnp.sum(y * r), y

    (_, y), (gx, gp) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        jnp.asarray(x), params
    )
    return {
        "model": label,
        "x": arr(x),
        "r": arr(r),
        "params": by_key(flat(params)),
        "flax_paths": paths(params),
        "num_params": count(params),
        "y": arr(y),
        "grad_x": arr(gx),
        "grads": by_key(flat(gp)),
    }


out = {
    "about": (
        f"flax {flax.__version__} / jax {jax.__version__} linen models (a ResNet stage, a "
        "Transformer encoder, an MLP), float64, made by tests/python/make_flax_compact_v2.py. "
        "Tensors in flaxen's layout under flaxen's checkpoint keys (flax_paths maps them to "
        "Flax's); images NCHW. loss = sum(y * r); grad_x and grads are d loss / d x and d loss "
        "/ d each parameter. The stage's y, grads and batch_stats_after are training mode "
        "(batch statistics, mutable batch_stats), eval_y is use_running_average=True with "
        "batch_stats."
    ),
    "stage": stage_case(),
    "encoder": plain_case(
        Encoder(), "Encoder(num_layers=2) of EncoderBlock(num_heads=4, mlp_dim=64)",
        normal(3, 8, 32, scale=1.3, shift=-0.2),
    ),
    "mlp": plain_case(Mlp(), "Mlp(hidden=24, depth=3, out=10)", normal(3, 20, scale=1.4, shift=0.2)),
}
print(json.dumps(out))
