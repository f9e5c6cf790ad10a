"""Writes the fixture of a Vision Transformer port: a Flax checkpoint of
the `VisionTransformer` of google-research/vision_transformer, saved
exactly as `flax.serialization.to_bytes(variables)` returns it, with its
output and gradients in float32 and float64, and the loss curves of a
small training task both sides can run from the data stored here.

    /tmp/venv/bin/python tests/python/make_flax_vit.py [OUTDIR]

writes tests/fixtures/flax_port_vit.{msgpack,json}, or those files in
OUTDIR to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, optax 0.2.8, numpy 2.4.6, msgpack 1.2.4 made the
committed files (Python 3.11; requirements.txt). The float64 results come
from a second run of the script in a process of its own
(`fixture_out.main_f64`), since `jax_enable_x64` is process-wide.

The model is retyped here from vit_jax/models_vit.py (read at commit
06862cdaf01e68e19de60c1853b3437a107d9c2c): `IdentityLayer`,
`AddPositionEmbs`, `MlpBlock`, `Encoder1DBlock`, `Encoder`,
`VisionTransformer`, with the same attributes, defaults, initialisers,
submodule names and call order. Dropped: `dtype` (float32 throughout; the
source passes it to every Dense, LayerNorm and the attention), the ResNet
root of the hybrid models (`resnet`, `conv_root`, `gn_root`, the
`ResNetStage`s of models_resnet.py: `resnet=None` here, as in the plain
ViT configs), the classifiers other than 'token' ('gap', 'unpooled'; any
other value raises, as the source does for unknown ones), the `encoder`
attribute (always `Encoder`), `model_name` (unused by the forward), the
`transformer is None` branch (a transformer is always given) and the
`ml_collections` ConfigDict of `patches`, replaced by a frozen dataclass
with the same `size` field. The source's shape asserts are kept.

Configuration: `VisionTransformer(num_classes=7, patches=Patches(size=(4,
4)), transformer=dict(num_layers=2, mlp_dim=40, num_heads=3,
dropout_rate=0.1, attention_dropout_rate=0.1), hidden_size=24,
representation_size=10, classifier='token', head_bias_init=0.0)` on
3-channel 16x16 images:

- `embedding`: Conv(24, 4x4, stride 4, padding "VALID", with bias): 16 ->
  4 on both axes, NHWC [n, 4, 4, 24] reshaped row-major to [n, 16, 24]:
  patch token = h * 4 + w (the patch whose top-left pixel is (4h, 4w)),
  channels last.
- `cls`: a (1, 1, 24) parameter (zero init), tiled over the batch and
  concatenated *before* the patches: sequence position 0 is the class
  token, position 1 + h * 4 + w the patch (h, w); 17 tokens.
- `Transformer` (Encoder): `posembed_input` adds its `pos_embedding` (1,
  17, 24) (init normal(0.02)), Dropout(0.1), then `encoderblock_0`,
  `encoderblock_1`, then `encoder_norm` (LayerNorm).
- Each encoderblock (pre-norm): x = `LayerNorm_0`(inputs); x =
  `MultiHeadDotProductAttention_0`(x, x) (self-attention: the source's
  call passes inputs_q = inputs_k = x, and Flax takes inputs_v =
  inputs_k); Dropout(0.1); x = x + inputs; y = `LayerNorm_1`(x); y =
  `MlpBlock_0`(y): `Dense_0` 24 -> 40, gelu, Dropout, `Dense_1` 40 -> 24,
  Dropout; return x + y.
- The attention: 3 heads of 24 / 3 = 8 features (qkv_features and
  out_features default to the input's 24). `query`, `key`, `value` are
  DenseGeneral 24 -> (3, 8), kernels (24, 3, 8), biases (3, 8); the query
  is divided by sqrt(8) before the logits einsum('...qhd,...khd->...hqk');
  softmax over the keys (float32); weights (n, heads, q, k) applied to the
  values; `out` DenseGeneral (3, 8) -> 24, kernel (3, 8, 24), bias (24).
  No mask, no qk normalisation. Kernels xavier_uniform (the source's
  `kernel_init`), biases zero. Attention dropout (rate 0.1,
  `broadcast_dropout=False`) acts on the softmaxed weights with a mask of
  their full shape (n, heads, q, k), one Bernoulli draw per element,
  kept values scaled by 1 / 0.9; with the default
  `broadcast_dropout=True` it would be one (q, k) mask shared across
  batch and heads. Nothing in this fixture runs with dropout on.
- Head: x[:, 0] (the class token, after `encoder_norm`), `pre_logits`
  Dense(10) and tanh (representation_size is 10; without it `pre_logits`
  would be a parameterless IdentityLayer), `head` Dense(7) (zero kernel
  init, bias init constant(head_bias_init = 0.0); perturbed here).

Flax semantics a port must match: every LayerNorm has epsilon 1e-6 (not
PyTorch's 1e-5), inside the square root: (x - mean) / sqrt(var + 1e-6),
var the biased variance over the last axis, computed by Flax as
max(0, mean(x^2) - mean(x)^2) (`use_fast_variance=True`); scale and bias
per feature. `nn.gelu` is jax.nn.gelu with `approximate=True`, the tanh
form 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). Dropout keeps an
element with probability 1 - rate and scales kept ones by 1 / (1 -
rate). MlpBlock's Dense kernels are xavier_uniform, its biases normal(1e-6)
(not zero); Dense kernels are (in, out), conv kernels HWIO.

Parameters (Flax paths and shapes; 10943 in all): `cls` (1, 1, 24);
`embedding/kernel` (4, 4, 3, 24), `embedding/bias` (24);
`Transformer/posembed_input/pos_embedding` (1, 17, 24); for i in 0, 1,
under `Transformer/encoderblock_i/`: `LayerNorm_0/{scale,bias}` (24),
`MultiHeadDotProductAttention_0/{query,key,value}/kernel` (24, 3, 8) and
`/bias` (3, 8), `MultiHeadDotProductAttention_0/out/kernel` (3, 8, 24) and
`/bias` (24), `LayerNorm_1/{scale,bias}` (24), `MlpBlock_0/Dense_0/kernel`
(24, 40), `/bias` (40), `MlpBlock_0/Dense_1/kernel` (40, 24), `/bias`
(24); `Transformer/encoder_norm/{scale,bias}` (24); `pre_logits/kernel`
(24, 10), `/bias` (10); `head/kernel` (10, 7), `/bias` (7). The script
prints them as it saves.

The checkpoint: the model initialised by Flax from `PRNGKey(31)` (train
False, so no dropout key), then every parameter perturbed from a seeded
numpy generator by `fixture_out.perturb` (`p + 0.1 * N(0, 1)`, so the zero
`cls`, `head` kernel and biases, and the unit LayerNorm scales hide
nothing). Everything saved is float32.

In flax_port_vit.json (arrays are `{"shape": [...], "data": [flat
row-major]}`, `flax_keys.arr`):

- "x" [5, 3, 16, 16]: a batch of 5 images from a seeded standard normal,
  in flaxen's NCHW layout (transposed to NHWC here before Flax sees them);
- "out" [5, 7]: the logits with `train=False` (no dropout), from the
  perturbed parameters;
- "w" [5, 7]: a fixed standard normal array; "loss" = sum(out * w), also
  with `train=False` (the model has no BatchNorm, so there is no other
  mode to test without dropout keys);
- "grads": d loss / d params keyed "params/<Flax path>"
  ("params/Transformer/encoderblock_0/MultiHeadDotProductAttention_0/query/kernel"),
  in Flax's own layouts;
- "out_f64", "loss_f64", "grads_f64": the same in float64, on the
  float32 checkpoint's values widened (x and w widened likewise), for a
  float64 port to be held to at 1e-9;
- "paths": the sorted "/" paths of every leaf of the msgpack; "num_params";
- "train": the training curves below.

Training task ("train"): 48 images [48, 3, 16, 16] NCHW ("train_x",
float32) and labels ("train_y", integers in [0, 7)), drawn from
`np.random.default_rng(20261231)`: the 48 labels first
(`integers(0, 7, 48)`), then the noise `0.5 * standard_normal((48, 3, 16,
16))`, then +1.0 added on all 3 channels of the 4x4 patch number y of
each image, patches numbered row-major over the 4x4 grid (patch y covers
rows 4 (y // 4) .. +3 and columns 4 (y % 4) .. +3, so it is the
embedding's token y, sequence position y + 1 after the class token);
computed in float64 and rounded to float32 once, at the end. `optax.adam(1e-3)`, full batch (all 48
every step), loss `optax.softmax_cross_entropy_with_integer_labels(...)
.mean()`, 60 steps, forward with `train=False`: dropout off, so the
curves are deterministic (with train=True every Dropout and the attention
dropout would need a 'dropout' key). Parameters start from Flax's own
initialisation, not perturbed, from `PRNGKey(s)` for the init seeds s =
1 .. 5. "seeds" ([1, ..., 5]), "steps" (60), "learning_rate" (1e-3);
"losses": per seed, 61 values, the full-batch loss
before each of the 60 steps and after the last; "mean", "std": per step
across the 5 seeds (numpy's std, ddof 0); "step0" and "step60": {"mean",
"std"} of the first and last values; "accuracy": per seed, the fraction
of the 48 images classified right after the 60 steps. Because `head`'s
kernel and bias start at zero every seed's first loss is exactly ln 7 =
1.9459 (std 0). Run on CPU (an AMD EPYC machine) this gave a mean loss
of 1.9459 at step 0, 1.8987 at step 10 (std 0.0029), 1.7009 at step 30
(std 0.0201) and 1.4086 at step 60 (std 0.0078; the five final losses
1.3998 .. 1.4221), and final accuracies 0.79 .. 0.92 (38 to 44 of the 48
images): the task is learnt, and the curve is still falling at step 60.
The script prints these figures as it runs.

Gradients a comparison must treat with an absolute tolerance: d loss / d
`key/bias` is zero in exact arithmetic (the key bias adds q . b_k to every
logit of a query's row, which the softmax ignores), so "grads" holds
float32 rounding there (up to 1.8e-7) and "grads_f64" float64 rounding
(up to 4e-16). Flax's float32 run is within 2.3e-7 of "out_f64" and
5.1e-6 of "grads_f64" (at most 1.1e-6 of a leaf's largest gradient).
"""

import dataclasses
from typing import Any, Callable, Optional, Tuple

from fixture_out import enable_x64_in_f64_pass, grad_gaps, main_f64, normal, perturb, save

# The float64 reference pass (see `vit_f64`) runs in a process of its own:
# `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from flax_keys import arr, by_path, from_arr, leaves  # noqa: E402

NAME = "flax_port_vit"


# google-research/vision_transformer vit_jax/models_vit.py


@dataclasses.dataclass(frozen=True)
class Patches:
    """Stands for the `ml_collections.ConfigDict` of the source's config:
    the model reads only `patches.size`."""

    size: Tuple[int, int]


class IdentityLayer(nn.Module):
    """Returns its input; a named place for an array."""

    @nn.compact
    def __call__(self, x):
        return x


class AddPositionEmbs(nn.Module):
    """A learned (1, length, features) embedding added to the inputs."""

    posemb_init: Callable

    @nn.compact
    def __call__(self, inputs):
        assert inputs.ndim == 3, f"expected (batch, length, features), got {inputs.shape}"
        shape = (1, inputs.shape[1], inputs.shape[2])
        pe = self.param("pos_embedding", self.posemb_init, shape)
        return inputs + pe


class MlpBlock(nn.Module):
    """Dense, gelu, Dropout, Dense, Dropout."""

    mlp_dim: int
    out_dim: Optional[int] = None
    dropout_rate: float = 0.1
    kernel_init: Callable = nn.initializers.xavier_uniform()
    bias_init: Callable = nn.initializers.normal(stddev=1e-6)

    @nn.compact
    def __call__(self, inputs, *, deterministic):
        out_dim = inputs.shape[-1] if self.out_dim is None else self.out_dim
        h = nn.Dense(self.mlp_dim, kernel_init=self.kernel_init, bias_init=self.bias_init)(inputs)
        h = nn.gelu(h)
        h = nn.Dropout(rate=self.dropout_rate)(h, deterministic=deterministic)
        out = nn.Dense(out_dim, kernel_init=self.kernel_init, bias_init=self.bias_init)(h)
        return nn.Dropout(rate=self.dropout_rate)(out, deterministic=deterministic)


class Encoder1DBlock(nn.Module):
    """Pre-norm block: self-attention then MLP, each with a residual."""

    mlp_dim: int
    num_heads: int
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, inputs, *, deterministic):
        assert inputs.ndim == 3, f"expected (batch, length, features), got {inputs.shape}"
        x = nn.LayerNorm()(inputs)
        x = nn.MultiHeadDotProductAttention(
            kernel_init=nn.initializers.xavier_uniform(),
            broadcast_dropout=False,
            deterministic=deterministic,
            dropout_rate=self.attention_dropout_rate,
            num_heads=self.num_heads,
        )(x, x)
        x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=deterministic)
        x = x + inputs

        y = nn.LayerNorm()(x)
        y = MlpBlock(mlp_dim=self.mlp_dim, dropout_rate=self.dropout_rate)(y, deterministic=deterministic)
        return x + y


class Encoder(nn.Module):
    """Position embedding, `num_layers` blocks, a final LayerNorm."""

    num_layers: int
    mlp_dim: int
    num_heads: int
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    add_position_embedding: bool = True

    @nn.compact
    def __call__(self, x, *, train):
        assert x.ndim == 3
        if self.add_position_embedding:
            x = AddPositionEmbs(posemb_init=nn.initializers.normal(stddev=0.02), name="posembed_input")(x)
            x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=not train)
        for layer in range(self.num_layers):
            x = Encoder1DBlock(
                mlp_dim=self.mlp_dim,
                dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                name=f"encoderblock_{layer}",
                num_heads=self.num_heads,
            )(x, deterministic=not train)
        return nn.LayerNorm(name="encoder_norm")(x)


class VisionTransformer(nn.Module):
    """Patch embedding, class token, Encoder, head (no ResNet root)."""

    num_classes: int
    patches: Any
    transformer: Any
    hidden_size: int
    representation_size: Optional[int] = None
    classifier: str = "token"
    head_bias_init: float = 0.0

    @nn.compact
    def __call__(self, inputs, *, train):
        if self.classifier != "token":
            raise ValueError(f"only classifier='token' is retyped here, not {self.classifier!r}")
        x = nn.Conv(
            features=self.hidden_size,
            kernel_size=self.patches.size,
            strides=self.patches.size,
            padding="VALID",
            name="embedding",
        )(inputs)
        n, h, w, c = x.shape
        x = jnp.reshape(x, [n, h * w, c])
        cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
        x = jnp.concatenate([jnp.tile(cls, [n, 1, 1]), x], axis=1)
        x = Encoder(name="Transformer", **self.transformer)(x, train=train)
        x = x[:, 0]
        if self.representation_size is not None:
            x = nn.Dense(self.representation_size, name="pre_logits")(x)
            x = nn.tanh(x)
        else:
            x = IdentityLayer(name="pre_logits")(x)
        if self.num_classes:
            x = nn.Dense(
                self.num_classes,
                name="head",
                kernel_init=nn.initializers.zeros,
                bias_init=nn.initializers.constant(self.head_bias_init),
            )(x)
        return x


def make_model():
    return VisionTransformer(
        num_classes=7,
        patches=Patches(size=(4, 4)),
        transformer=dict(num_layers=2, mlp_dim=40, num_heads=3, dropout_rate=0.1, attention_dropout_rate=0.1),
        hidden_size=24,
        representation_size=10,
        classifier="token",
        head_bias_init=0.0,
    )


# flaxen's NCHW images to Flax's NHWC.


def nhwc(x):
    return jnp.asarray(np.transpose(x, (0, 2, 3, 1)))


# The training task.

TRAIN_N = 48
TRAIN_STEPS = 60
TRAIN_SEEDS = [1, 2, 3, 4, 5]
PATCH = 4


def train_data():
    """48 images, label y in [0, 7), 0.5 N(0, 1) noise plus 1.0 on the
    4x4 patch number y (row-major over the 4x4 grid, all channels)."""
    rng = np.random.default_rng(20261231)
    y = rng.integers(0, 7, TRAIN_N)
    x = 0.5 * rng.standard_normal((TRAIN_N, 3, 16, 16))
    for i, label in enumerate(y):
        r, c = PATCH * (label // 4), PATCH * (label % 4)
        x[i, :, r:r + PATCH, c:c + PATCH] += 1.0
    return x.astype(np.float32), y.astype(np.int32)


def train_curves(model, x, y):
    tx = optax.adam(1e-3)
    xs = nhwc(x)
    ys = jnp.asarray(y)

    def loss_fn(params):
        logits = model.apply({"params": params}, xs, train=False)
        return optax.softmax_cross_entropy_with_integer_labels(logits, ys).mean(), logits

    @jax.jit
    def step(params, state):
        (loss, _), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, state = tx.update(g, state, params)
        return optax.apply_updates(params, updates), state, loss

    final_loss = jax.jit(loss_fn)
    losses, accuracy = [], []
    for seed in TRAIN_SEEDS:
        params = model.init(jax.random.PRNGKey(seed), xs, train=False)["params"]
        state = tx.init(params)
        curve = []
        for _ in range(TRAIN_STEPS):
            params, state, loss = step(params, state)
            curve.append(float(loss))
        loss, logits = final_loss(params)
        curve.append(float(loss))
        losses.append(curve)
        accuracy.append(float(np.mean(np.argmax(np.asarray(logits), axis=-1) == y)))
    curves = np.asarray(losses)
    mean, std = curves.mean(axis=0), curves.std(axis=0)
    print(f"train: {TRAIN_N} images, labels {np.bincount(y, minlength=7).tolist()} per class, "
          f"adam(1e-3), {TRAIN_STEPS} full-batch steps, seeds {TRAIN_SEEDS}")
    for s in (0, 10, 30, 60):
        print(f"  step {s}: mean loss {mean[s]:.4f}, std {std[s]:.4f}")
    print(f"  final accuracy per seed: {accuracy}")
    return {
        "train_x": arr(x),
        "train_y": [int(v) for v in y],
        "seeds": TRAIN_SEEDS,
        "steps": TRAIN_STEPS,
        "learning_rate": 1e-3,
        "losses": losses,
        "mean": [float(v) for v in mean],
        "std": [float(v) for v in std],
        "step0": {"mean": float(mean[0]), "std": float(std[0])},
        "step60": {"mean": float(mean[-1]), "std": float(std[-1])},
        "accuracy": accuracy,
    }


# The fixture.


def vit(out):
    rng = np.random.default_rng(20261230)
    model = make_model()
    x = normal(rng, (5, 3, 16, 16))
    w = normal(rng, (5, 7))
    variables = perturb(model.init(jax.random.PRNGKey(31), nhwc(x), train=False), rng)

    def loss_fn(params):
        y = model.apply({"params": params}, nhwc(x), train=False)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert y.shape == (5, 7) and y.dtype == jnp.float32
    print(f"{NAME}: embedding 4x4 stride 4 VALID: 16 -> 4, 16 patches + cls = 17 tokens")
    tx, ty = train_data()
    save(out, NAME, variables, {
        "x": arr(x),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": by_path(grads, "params"),
        "train": train_curves(model, tx, ty),
    })


def vit_f64(fields, variables):
    """Adds to flax_port_vit.json's fields the same forward and gradient in
    float64, on the float32 checkpoint's values widened (`variables`):
    "out_f64", "loss_f64", "grads_f64"."""
    model = make_model()
    x, w = from_arr(fields["x"]), from_arr(fields["w"])

    def loss_fn(params):
        y = model.apply({"params": params}, nhwc(x), train=False)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert y.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in leaves(grads).values())
    fields["out_f64"] = arr(y)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = by_path(grads, "params")
    out32 = from_arr(fields["out"])
    gap, _ = grad_gaps(fields)
    print(f"{NAME} float64: max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e}, "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e}, max |grads - grads_f64| {gap:.2e}")


if __name__ == "__main__":
    main_f64(__file__, vit, NAME, vit_f64)
