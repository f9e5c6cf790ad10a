"""Writes tests/fixtures/flax_inits.json: statistics of Flax's own
initialisers, drawn by the Flax layers that use them, so that a Rust test
can compare flaxen's initialisers with Flax's statistically (moments of
large draws, truncation bounds, the fans each layer hands to
`variance_scaling`).

    /tmp/venv/bin/python tests/python/make_flax_inits.py [OUTDIR]

writes into tests/fixtures/, or into OUTDIR to compare a fresh run with the
committed file. jax 0.10.2, jaxlib 0.10.2, flax 0.12.8, numpy 2.4.6 made
the committed file (Python 3.11; requirements.txt). The JSON is compact
(no spaces) and holds no raw arrays, only per-leaf statistics.

Five linen modules (`I = nn.initializers`; NHWC; batch 2), each initialised
with `model.init(fold_in(PRNGKey(0), i), x)`, i = 0..4 in the order below,
on a float32 input of ones (InitTokens: int32 tokens `(7 * arange(24)) %
300` reshaped to (2, 12)); the inputs only fix the shapes:

1. `InitDense`, x (2, 300), the chain x = Dense_k(x), k = 0..19, no
   activations: `DENSE` below lists every layer's features, kernel_init and
   bias_init (None: `use_bias=False`; "default": Dense's own
   `zeros_init()`).
2. `InitConv`, x (2, 9, 9, 6): Conv_0 = Conv(48, (3, 5),
   he_normal(), bias uniform(2.0)); Conv_1 = Conv(32, (3, 3),
   feature_group_count=4, lecun_normal()); GroupNorm_0(num_groups=4,
   scale uniform(3.0), bias constant(-1.0)); ConvTranspose_0 =
   ConvTranspose(20, (3, 3), xavier_uniform(), bias constant(0.25));
   BatchNorm_0(use_running_average=True, scale zeros, bias normal(1.0));
   Conv_2 = Conv(64, (1, 1), variance_scaling(1.0, "fan_avg", "uniform")).
   All "SAME", so every map stays 9 x 9.
3. `InitTokens`, tokens (2, 12): x = Embed_0(t) + Embed_1(t) + Embed_2(t)
   (Embed(500, 48, normal(1.0)), Embed(300, 48, variance_scaling(1.0,
   "fan_in", "uniform")), Embed(400, 48) with Flax's default init);
   MultiHeadDotProductAttention_0(num_heads=4, qkv_features=64,
   xavier_uniform(), bias truncated_normal(0.1))(x, x);
   MultiHeadDotProductAttention_1(num_heads=2, qkv_features=32,
   out_features=40, he_uniform())(x, x) on that output;
   LayerNorm_0(scale constant(2.0), bias ones); RMSNorm_0(scale
   normal(0.5)).
4. `InitRnn`, x (2, 7, 24): nn.RNN(LSTMCell(64, glorot_normal(),
   recurrent orthogonal(), bias ones)), nn.RNN(GRUCell(48,
   kaiming_uniform(), recurrent lecun_normal(), bias constant(0.1))),
   nn.RNN(SimpleCell(40, xavier_uniform(), recurrent normal(0.3), bias
   constant(0.5))), chained.
5. `InitParams`, x (2, 10, 16): seven raw `self.param`s (`cls` zeros (1, 1,
   16), `pos_embedding` normal(0.02) (1, 10, 16), `w` xavier_uniform() (200,
   300), `t` truncated_normal(0.5, lower=-1, upper=3) (100, 100), `scale`
   ones (16,), `c` constant(0.3) (4, 16), `v` lecun_normal() (64, 3, 3,
   32)); returns concat([tile(cls), x + pos], axis=1) * scale.

Every name asked for exists in flax 0.12.8 / jax 0.10.2:
`flax.linen.initializers` re-exports jax.nn.initializers (zeros, ones,
constant, normal, uniform, truncated_normal, variance_scaling,
glorot_/xavier_, lecun_, he_/kaiming_ uniform and normal, orthogonal,
delta_orthogonal) and adds `zeros_init()` / `ones_init()`, which return
`zeros` / `ones` themselves.

JSON: "versions" (jax, jaxlib, flax, numpy); "variance_scaling_accepts"
(see below); "models", the five names in order; then per model
"<model>" -> "<collection>/<path joined by />" (e.g. "InitDense" ->
"params/Dense_0/kernel"; "batch_stats/BatchNorm_0/mean") -> leaf:

- "shape" (Flax's), "n" (elements), "mean", "std" (population, ddof=0),
  "min", "max" of Flax's float32 draw, computed in float64; nothing is
  rounded;
- "init": the initialiser as written (`I.` left off, e.g.
  "xavier_uniform()", "variance_scaling(2.0, 'fan_out', 'normal')",
  "zeros"), or "default", with then "default_init" what the layer's default
  is ("zeros_init()" for Dense/Conv/attention biases, "zeros" / "ones" for
  BatchNorm's batch_stats, "variance_scaling(1.0, 'fan_in', 'normal',
  out_axis=0)" for Embed);
- "kind": "variance_scaling", "normal", "uniform", "truncated_normal",
  "orthogonal" or "constant"; for variance_scaling also "scale", "mode",
  "distribution", "in_axis", "out_axis" (as resolved from the named
  shortcut);
- "init_shape": the shape the layer handed to the initialiser (Flax's
  shape, except in attention: see DenseGeneral below);
- "fan_in", "fan_out": for variance_scaling leaves, what jax's own
  `jax._src.nn.initializers._compute_fans(init_shape, in_axis, out_axis)`
  returns (floats, as jax computes them); null elsewhere;
- "expected_mean", "expected_std": of the distribution (per element);
  "support": [lo, hi], the bounds of the distribution, null where it is
  unbounded (normal) or for orthogonal; "exact": the value of a constant
  leaf (zeros, ones, constant) as written, else null (Flax stores it as
  float32: constant(0.1) leaves hold float32(0.1) = 0.10000000149011612,
  which is what their "mean", "min", "max" show);
- orthogonal leaves also: "orthogonality_error" = max |G - scale^2 I| of
  Flax's draw (float64), M the draw reshaped (prod(shape[:-1]),
  shape[-1]) and G the smaller Gram matrix (M^T M if M has at least as many
  rows as columns, else M M^T), and "expected_rms" = scale * sqrt(min(r,
  c) / (r * c)), the exact root mean square of any such (r, c) matrix (its
  squares sum to min(r, c) scale^2). Their "expected_std" is null and
  "expected_mean" 0.

The formulas (jax/_src/nn/initializers.py and jax/_src/random/core.py of
jax 0.10.2, read for this):

- zeros, ones, constant(v): every element v. expected_std 0, support [v, v].
- normal(stddev=0.01): N(0, 1) * stddev, unbounded.
- uniform(scale=0.01): `random.uniform` in [0, 1) times scale: support [0,
  scale) (half-open), mean scale / 2, std scale / sqrt(12). Not symmetric.
- truncated_normal(stddev=0.01, lower=-2, upper=2): a standard normal
  truncated to (lower, upper), then times stddev: support [lower * stddev,
  upper * stddev]; with phi, Phi the standard normal density and cdf, Z =
  Phi(b) - Phi(a), the mean is stddev * (phi(a) - phi(b)) / Z and the
  variance stddev^2 * (1 + (a phi(a) - b phi(b)) / Z - ((phi(a) - phi(b)) /
  Z)^2). `stddev` is NOT corrected for the truncation (the docstring says
  so): truncated_normal(0.5, -1, 3) has mean 0.1414 and std 0.3925, not 0
  and 0.5. The sample is sqrt(2) erfinv(u), u uniform in [erf(a / sqrt 2),
  erf(b / sqrt 2)), clipped to the open interval (nextafter(a, +inf),
  nextafter(b, -inf)) before the multiplication.
- variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1,
  batch_axis=()): `_compute_fans`: in_size = shape[in_axis], out_size =
  shape[out_axis] (products over sequences of axes), receptive_field =
  prod(shape) / in_size / out_size / batch_size (a float division),
  fan_in = in_size * receptive_field, fan_out = out_size * receptive_field.
  fan = fan_in, fan_out, (fan_in + fan_out) / 2 ("fan_avg") or sqrt(fan_in
  * fan_out) ("fan_geo_avg"); variance = scale / fan (cast to the param
  dtype, float32, before the square root). Then
  "normal": N(0, 1) * sqrt(variance), untruncated;
  "truncated_normal": a standard normal truncated to (-2, 2) times
  sqrt(variance) / 0.87962566103423978 (the std of that truncated normal),
  so std = sqrt(variance), support +-2 sqrt(variance) / 0.8796...;
  "uniform": uniform in [-1, 1) times sqrt(3 variance), so support
  [-sqrt(3 variance), sqrt(3 variance)), std sqrt(variance).
  The shortcuts: glorot_uniform = xavier_uniform = (1.0, "fan_avg",
  "uniform"); glorot_normal = xavier_normal = (1.0, "fan_avg",
  "truncated_normal"); lecun_uniform = (1.0, "fan_in", "uniform");
  lecun_normal = (1.0, "fan_in", "truncated_normal"); he_uniform =
  kaiming_uniform = (2.0, "fan_in", "uniform"); he_normal = kaiming_normal
  = (2.0, "fan_in", "truncated_normal"). So the "normal" named ones
  (glorot_normal, lecun_normal, he_normal) are truncated normals.
- orthogonal(scale=1.0, column_axis=-1): the shape flattened to (rows =
  prod(shape) / shape[column_axis], cols = shape[column_axis]);
  `random.orthogonal`: Z = N(0, 1) of shape (max, min), Q R = qr(Z), Q
  times sign(diag(R)) column-wise, transposed if rows < cols; reshaped
  back; times scale. So the columns (rows >= cols) or the rows are
  orthonormal times scale; every |entry| <= scale; per element mean 0 and
  variance scale^2 / max(rows, cols) in distribution.

variance_scaling checks its mode and distribution only when the returned
initialiser is called, not when it is built. jax 0.10.2 accepts "fan_in",
"fan_out", "fan_avg", "fan_geo_avg" and "truncated_normal", "normal",
"uniform" (real dtypes; complex dtypes get a disk). "untruncated_normal"
(older jax's name for the plain normal) is NOT accepted: calling the
initialiser raises ValueError "invalid distribution for variance scaling
initializer"; "normal" is the untruncated one. The script checks both and
writes the outcome under "variance_scaling_accepts".

The fans each layer gives (flax 0.12.8 flax/linen/linear.py, attention.py,
recurrent.py, normalization.py, read for this):

- Dense: kernel (in, out), so fan_in = in, fan_out = out; bias (out,).
  Default kernel_init lecun_normal(), bias_init zeros_init().
- Conv: kernel (kh, kw, in / feature_group_count, out) (HWIO), so
  fan_in = kh * kw * in / groups and fan_out = kh * kw * out: the group
  count divides fan_in only (Conv_1 here: kernel (3, 3, 12, 32), fan_in
  108, fan_out 288). Bias (out,).
- ConvTranspose (transpose_kernel=False, the default): kernel (kh, kw, in,
  out), so fan_in = kh * kw * in, fan_out = kh * kw * out, the same rule
  as Conv although the kernel maps the other way.
- MultiHeadDotProductAttention builds `query`, `key`, `value` as
  DenseGeneral(features=(heads, head_dim), axis=-1) and `out` as
  DenseGeneral(features, axis=(-2, -1)). DenseGeneral calls kernel_init
  (and bias_init) on the FLATTENED shape and reshapes the draw:
  (prod(contracted axes), prod(features)). So a query/key/value kernel
  (F, H, D) is drawn as (F, H * D): fan_in = F, fan_out = H * D; an `out`
  kernel (H, D, O) as (H * D, O): fan_in = H * D, fan_out = O; a q/k/v
  bias (H, D) as (H * D,). Without the flattening the default axes would
  have given (F, H, D) fan_in = F * H, fan_out = F * D. `out` uses
  out_kernel_init / out_bias_init when given, else kernel_init / bias_init
  (so truncated_normal(0.1) lands on all eight leaves of attention 0).
- Embed: embedding (num_embeddings, features). Its default init is
  variance_scaling(1.0, "fan_in", "normal", out_axis=0): in_axis -2 and
  out_axis 0 are the same axis, so receptive_field = features /
  num_embeddings and fan_in = fan_out = features: N(0, 1 / features),
  untruncated (std 1/sqrt(48) here whatever the vocabulary). A
  user-given variance_scaling with the default axes instead takes fan_in =
  num_embeddings, fan_out = features (Embed_1: fan_in 300).
- LSTMCell: input kernels `ii`, `if`, `ig`, `io` (in, hidden) with
  kernel_init and NO bias; recurrent `hi`, `hf`, `hg`, `ho` (hidden,
  hidden) with recurrent_kernel_init and a bias (bias_init) each.
- GRUCell: input `ir`, `iz`, `in` (in, hidden) with kernel_init and a bias
  each; recurrent `hr`, `hz` (hidden, hidden) with recurrent_kernel_init
  and no bias; `hn` (hidden, hidden) with recurrent_kernel_init and a bias.
- SimpleCell: `i` (in, hidden) with kernel_init and a bias; `h` (hidden,
  hidden) with recurrent_kernel_init, no bias.
  Defaults of all three: kernel lecun_normal(), recurrent orthogonal(),
  bias zeros_init(). A cell built inside the parent's compact method and
  handed to nn.RNN belongs to the parent: its params sit at
  "params/LSTMCell_0/ii/kernel" (no "RNN_0" level; the RNN has no
  params of its own).
- GroupNorm, LayerNorm, RMSNorm, BatchNorm: scale and bias (features,);
  defaults scale ones, bias zeros (initializers.ones / zeros).
  BatchNorm's batch_stats "mean" / "var" are zeros / ones always (not
  initialisers).

Checks made as the script runs (it stops on a failure): the leaves found
are exactly the leaves described; every param leaf is redrawn from the
PRNG key Flax gave its initialiser (caught by wrapping
`flax.core.scope.Scope.param` for the `init` call only), with the
initialiser as described here, on the "init_shape" given here and reshaped
to Flax's shape, and must equal Flax's draw bit for bit (this proves the
DenseGeneral flattening and every description; with the unflattened
shapes the first attention kernel differs); constants are exact (in
float32); every draw lies in its support; |mean - expected_mean| <= 6 expected_std / sqrt(n) and
|std / expected_std - 1| <= 6 / sqrt(n) (loose for the small leaves);
orthogonality_error < 1e-5.
"""

import math

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from flax.core import scope as flax_scope
from jax._src.nn.initializers import _compute_fans

from fixture_out import write

I = nn.initializers

# The initialisers as written, `I.` left off. Also `eval`ed twice: in
# `vars(I)` (the real initialiser, for the redraw check) and in `SPEC`
# (the analytic description).
DENSE = [
    (256, "xavier_uniform()", "normal(stddev=0.5)"),
    (256, "variance_scaling(2.0, 'fan_out', 'normal')", "uniform(scale=2.0)"),
    (256, "glorot_normal()", None),
    (256, "lecun_uniform()", "truncated_normal(stddev=0.5)"),
    (256, "kaiming_normal()", "constant(0.25)"),
    (256, "variance_scaling(0.5, 'fan_avg', 'truncated_normal')", "ones"),
    (256, "variance_scaling(3.0, 'fan_in', 'uniform')", "zeros"),
    (256, "zeros", "ones_init()"),
    (256, "constant(-0.5)", "zeros_init()"),
    (128, "orthogonal()", "default"),
    (256, "truncated_normal(stddev=2.0, lower=-1.0, upper=0.5)", "default"),
    (256, "he_uniform()", "default"),
    (256, "xavier_normal()", "normal(stddev=3.0)"),
    (256, "kaiming_uniform()", "default"),
    (256, "normal(stddev=0.2)", "default"),
    (256, "uniform(scale=0.5)", "default"),
    (256, "he_normal()", "default"),
    (256, "lecun_normal()", "default"),
    (256, "glorot_uniform()", "default"),
    (200, "orthogonal(scale=2.0)", "default"),
]


class InitDense(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(256, kernel_init=I.xavier_uniform(), bias_init=I.normal(stddev=0.5))(x)
        x = nn.Dense(256, kernel_init=I.variance_scaling(2.0, "fan_out", "normal"),
                     bias_init=I.uniform(scale=2.0))(x)
        x = nn.Dense(256, kernel_init=I.glorot_normal(), use_bias=False)(x)
        x = nn.Dense(256, kernel_init=I.lecun_uniform(), bias_init=I.truncated_normal(stddev=0.5))(x)
        x = nn.Dense(256, kernel_init=I.kaiming_normal(), bias_init=I.constant(0.25))(x)
        x = nn.Dense(256, kernel_init=I.variance_scaling(0.5, "fan_avg", "truncated_normal"),
                     bias_init=I.ones)(x)
        x = nn.Dense(256, kernel_init=I.variance_scaling(3.0, "fan_in", "uniform"),
                     bias_init=I.zeros)(x)
        x = nn.Dense(256, kernel_init=I.zeros, bias_init=I.ones_init())(x)
        x = nn.Dense(256, kernel_init=I.constant(-0.5), bias_init=I.zeros_init())(x)
        x = nn.Dense(128, kernel_init=I.orthogonal())(x)
        x = nn.Dense(256, kernel_init=I.truncated_normal(stddev=2.0, lower=-1.0, upper=0.5))(x)
        x = nn.Dense(256, kernel_init=I.he_uniform())(x)
        x = nn.Dense(256, kernel_init=I.xavier_normal(), bias_init=I.normal(stddev=3.0))(x)
        x = nn.Dense(256, kernel_init=I.kaiming_uniform())(x)
        x = nn.Dense(256, kernel_init=I.normal(stddev=0.2))(x)
        x = nn.Dense(256, kernel_init=I.uniform(scale=0.5))(x)
        x = nn.Dense(256, kernel_init=I.he_normal())(x)
        x = nn.Dense(256, kernel_init=I.lecun_normal())(x)
        x = nn.Dense(256, kernel_init=I.glorot_uniform())(x)
        x = nn.Dense(200, kernel_init=I.orthogonal(scale=2.0))(x)
        return x


class InitConv(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(48, (3, 5), kernel_init=I.he_normal(), bias_init=I.uniform(scale=2.0))(x)
        x = nn.Conv(32, (3, 3), feature_group_count=4, kernel_init=I.lecun_normal())(x)
        x = nn.GroupNorm(num_groups=4, scale_init=I.uniform(scale=3.0), bias_init=I.constant(-1.0))(x)
        x = nn.ConvTranspose(20, (3, 3), kernel_init=I.xavier_uniform(), bias_init=I.constant(0.25))(x)
        x = nn.BatchNorm(use_running_average=True, scale_init=I.zeros, bias_init=I.normal(stddev=1.0))(x)
        x = nn.Conv(64, (1, 1), kernel_init=I.variance_scaling(1.0, "fan_avg", "uniform"))(x)
        return x


class InitTokens(nn.Module):
    @nn.compact
    def __call__(self, t):
        x = (nn.Embed(500, 48, embedding_init=I.normal(stddev=1.0))(t)
             + nn.Embed(300, 48, embedding_init=I.variance_scaling(1.0, "fan_in", "uniform"))(t)
             + nn.Embed(400, 48)(t))
        x = nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=64, kernel_init=I.xavier_uniform(),
                                            bias_init=I.truncated_normal(stddev=0.1))(x, x)
        x = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=32, out_features=40,
                                            kernel_init=I.he_uniform())(x, x)
        x = nn.LayerNorm(scale_init=I.constant(2.0), bias_init=I.ones)(x)
        x = nn.RMSNorm(scale_init=I.normal(stddev=0.5))(x)
        return x


class InitRnn(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.RNN(nn.LSTMCell(64, kernel_init=I.glorot_normal(), recurrent_kernel_init=I.orthogonal(),
                               bias_init=I.ones))(x)
        x = nn.RNN(nn.GRUCell(48, kernel_init=I.kaiming_uniform(), recurrent_kernel_init=I.lecun_normal(),
                              bias_init=I.constant(0.1)))(x)
        x = nn.RNN(nn.SimpleCell(40, kernel_init=I.xavier_uniform(), recurrent_kernel_init=I.normal(stddev=0.3),
                                 bias_init=I.constant(0.5)))(x)
        return x


class InitParams(nn.Module):
    @nn.compact
    def __call__(self, x):
        n = x.shape[0]
        cls = self.param("cls", I.zeros, (1, 1, 16))
        pos = self.param("pos_embedding", I.normal(stddev=0.02), (1, 10, 16))
        self.param("w", I.xavier_uniform(), (200, 300))
        self.param("t", I.truncated_normal(stddev=0.5, lower=-1.0, upper=3.0), (100, 100))
        scale = self.param("scale", I.ones, (16,))
        self.param("c", I.constant(0.3), (4, 16))
        self.param("v", I.lecun_normal(), (64, 3, 3, 32))
        return jnp.concatenate([jnp.tile(cls, (n, 1, 1)), x + pos], axis=1) * scale


def dense_leaves():
    out = {}
    for k, (_, kernel, bias) in enumerate(DENSE):
        out[f"params/Dense_{k}/kernel"] = kernel
        if bias is not None:
            out[f"params/Dense_{k}/bias"] = ("default", "zeros_init()") if bias == "default" else bias
    return out


def attention_leaves(name, kernel, bias):
    return {f"params/{name}/{m}/{leaf}": (kernel if leaf == "kernel" else bias)
            for m in ("query", "key", "value", "out") for leaf in ("kernel", "bias")}


def cell_leaves(name, kernel, recurrent, bias, inputs, recurrents):
    """`inputs` / `recurrents`: {gate: has a bias}."""
    out = {}
    for gates, init in ((inputs, kernel), (recurrents, recurrent)):
        for gate, has_bias in gates.items():
            out[f"params/{name}/{gate}/kernel"] = init
            if has_bias:
                out[f"params/{name}/{gate}/bias"] = bias
    return out


DEFAULT_ZEROS = ("default", "zeros_init()")

# (model, input, {leaf path: init, or ("default", what the default is)}).
MODELS = [
    (InitDense, jnp.ones((2, 300), jnp.float32), dense_leaves()),
    (InitConv, jnp.ones((2, 9, 9, 6), jnp.float32), {
        "params/Conv_0/kernel": "he_normal()",
        "params/Conv_0/bias": "uniform(scale=2.0)",
        "params/Conv_1/kernel": "lecun_normal()",
        "params/Conv_1/bias": DEFAULT_ZEROS,
        "params/GroupNorm_0/scale": "uniform(scale=3.0)",
        "params/GroupNorm_0/bias": "constant(-1.0)",
        "params/ConvTranspose_0/kernel": "xavier_uniform()",
        "params/ConvTranspose_0/bias": "constant(0.25)",
        "params/BatchNorm_0/scale": "zeros",
        "params/BatchNorm_0/bias": "normal(stddev=1.0)",
        "batch_stats/BatchNorm_0/mean": ("default", "zeros"),
        "batch_stats/BatchNorm_0/var": ("default", "ones"),
        "params/Conv_2/kernel": "variance_scaling(1.0, 'fan_avg', 'uniform')",
        "params/Conv_2/bias": DEFAULT_ZEROS,
    }),
    (InitTokens, ((7 * jnp.arange(24, dtype=jnp.int32)) % 300).reshape(2, 12), {
        "params/Embed_0/embedding": "normal(stddev=1.0)",
        "params/Embed_1/embedding": "variance_scaling(1.0, 'fan_in', 'uniform')",
        "params/Embed_2/embedding": ("default", "variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)"),
        **attention_leaves("MultiHeadDotProductAttention_0", "xavier_uniform()", "truncated_normal(stddev=0.1)"),
        **attention_leaves("MultiHeadDotProductAttention_1", "he_uniform()", DEFAULT_ZEROS),
        "params/LayerNorm_0/scale": "constant(2.0)",
        "params/LayerNorm_0/bias": "ones",
        "params/RMSNorm_0/scale": "normal(stddev=0.5)",
    }),
    (InitRnn, jnp.ones((2, 7, 24), jnp.float32), {
        **cell_leaves("LSTMCell_0", "glorot_normal()", "orthogonal()", "ones",
                      {"ii": False, "if": False, "ig": False, "io": False},
                      {"hi": True, "hf": True, "hg": True, "ho": True}),
        **cell_leaves("GRUCell_0", "kaiming_uniform()", "lecun_normal()", "constant(0.1)",
                      {"ir": True, "iz": True, "in": True}, {"hr": False, "hz": False, "hn": True}),
        **cell_leaves("SimpleCell_0", "xavier_uniform()", "normal(stddev=0.3)", "constant(0.5)",
                      {"i": True}, {"h": False}),
    }),
    (InitParams, jnp.ones((2, 10, 16), jnp.float32), {
        "params/cls": "zeros",
        "params/pos_embedding": "normal(stddev=0.02)",
        "params/w": "xavier_uniform()",
        "params/t": "truncated_normal(stddev=0.5, lower=-1.0, upper=3.0)",
        "params/scale": "ones",
        "params/c": "constant(0.3)",
        "params/v": "lecun_normal()",
    }),
]


# The analytic side: `eval`ing an init string in SPEC gives its description.

def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=()):
    return {"kind": "variance_scaling", "scale": float(scale), "mode": mode, "distribution": distribution,
            "in_axis": in_axis, "out_axis": out_axis, "batch_axis": batch_axis}


def shortcut(scale, mode, distribution):
    return lambda in_axis=-2, out_axis=-1, batch_axis=(): variance_scaling(
        scale, mode, distribution, in_axis, out_axis, batch_axis)


def constant(value):
    return {"kind": "constant", "value": float(value)}


SPEC = {
    "variance_scaling": variance_scaling,
    "glorot_uniform": shortcut(1.0, "fan_avg", "uniform"),
    "xavier_uniform": shortcut(1.0, "fan_avg", "uniform"),
    "glorot_normal": shortcut(1.0, "fan_avg", "truncated_normal"),
    "xavier_normal": shortcut(1.0, "fan_avg", "truncated_normal"),
    "lecun_uniform": shortcut(1.0, "fan_in", "uniform"),
    "lecun_normal": shortcut(1.0, "fan_in", "truncated_normal"),
    "he_uniform": shortcut(2.0, "fan_in", "uniform"),
    "kaiming_uniform": shortcut(2.0, "fan_in", "uniform"),
    "he_normal": shortcut(2.0, "fan_in", "truncated_normal"),
    "kaiming_normal": shortcut(2.0, "fan_in", "truncated_normal"),
    "normal": lambda stddev=1e-2: {"kind": "normal", "stddev": float(stddev)},
    "uniform": lambda scale=1e-2: {"kind": "uniform", "scale": float(scale)},
    "truncated_normal": lambda stddev=1e-2, lower=-2.0, upper=2.0: {
        "kind": "truncated_normal", "stddev": float(stddev), "lower": float(lower), "upper": float(upper)},
    "orthogonal": lambda scale=1.0, column_axis=-1: {"kind": "orthogonal", "scale": float(scale)},
    "constant": constant,
    "zeros": constant(0.0),
    "ones": constant(1.0),
    "zeros_init": lambda: constant(0.0),
    "ones_init": lambda: constant(1.0),
}

# Std of a standard normal truncated to (-2, 2), as jax writes it.
TRUNC2 = 0.87962566103423978


def phi(x):
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def Phi(x):
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def truncated_moments(a, b):
    """Mean and std of a standard normal truncated to [a, b]."""
    z = Phi(b) - Phi(a)
    mean = (phi(a) - phi(b)) / z
    var = 1.0 + (a * phi(a) - b * phi(b)) / z - mean * mean
    return mean, math.sqrt(var)


def init_shape(path, shape):
    """The shape Flax hands the initialiser: DenseGeneral in attention
    flattens to (prod(contracted), prod(features))."""
    parts = path.split("/")
    if len(parts) >= 4 and parts[1].startswith("MultiHeadDotProductAttention_"):
        module, leaf = parts[2], parts[3]
        if module in ("query", "key", "value"):
            return (shape[0], shape[1] * shape[2]) if leaf == "kernel" else (shape[0] * shape[1],)
        if module == "out" and leaf == "kernel":
            return (shape[0] * shape[1], shape[2])
    return tuple(shape)


def expected(spec, ishape):
    """Analytic fields of one leaf: fans, expected_mean, expected_std,
    support, exact."""
    out = {"fan_in": None, "fan_out": None, "exact": None}
    kind = spec["kind"]
    if kind == "constant":
        v = spec["value"]
        out.update(expected_mean=v, expected_std=0.0, support=[v, v], exact=v)
    elif kind == "normal":
        out.update(expected_mean=0.0, expected_std=spec["stddev"], support=None)
    elif kind == "uniform":
        s = spec["scale"]
        out.update(expected_mean=s / 2.0, expected_std=s / math.sqrt(12.0), support=[0.0, s])
    elif kind == "truncated_normal":
        s, a, b = spec["stddev"], spec["lower"], spec["upper"]
        m, sd = truncated_moments(a, b)
        out.update(expected_mean=s * m, expected_std=s * sd, support=[a * s, b * s])
    elif kind == "orthogonal":
        s = spec["scale"]
        rows, cols = math.prod(ishape[:-1]), ishape[-1]
        out.update(expected_mean=0.0, expected_std=None, support=None,
                   expected_rms=s * math.sqrt(min(rows, cols) / (rows * cols)))
    elif kind == "variance_scaling":
        fan_in, fan_out = _compute_fans(ishape, spec["in_axis"], spec["out_axis"], spec["batch_axis"])
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0,
               "fan_geo_avg": math.sqrt(fan_in * fan_out)}[spec["mode"]]
        var = spec["scale"] / fan
        sd = math.sqrt(var)
        out.update(fan_in=float(fan_in), fan_out=float(fan_out), expected_mean=0.0)
        if spec["distribution"] == "normal":
            out.update(expected_std=sd, support=None)
        elif spec["distribution"] == "truncated_normal":
            u = sd / TRUNC2
            out.update(expected_std=u * truncated_moments(-2.0, 2.0)[1], support=[-2.0 * u, 2.0 * u])
        elif spec["distribution"] == "uniform":
            h = math.sqrt(3.0 * var)
            out.update(expected_std=sd, support=[-h, h])
        else:
            raise ValueError(spec["distribution"])
    else:
        raise ValueError(kind)
    return out


def flat(tree, prefix=()):
    out = {}
    for k, v in tree.items():
        if hasattr(v, "items"):
            out.update(flat(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def init_recording(model, key, x):
    """`model.init(key, x)`, and {"params/<path>": the PRNG key Flax gave
    that param's initialiser}. Scope.param is wrapped for the call only.
    nn.RNN's scan calls a cell's initialisers twice (once eagerly, once
    traced); the eager call's key is kept."""
    keys = {}
    original = flax_scope.Scope.param

    def param(scope, name, init_fn, *args, unbox=True, **kwargs):
        path = "/".join(("params",) + tuple(scope.path) + (name,))

        def recorded(rng, *a, **kw):
            if path not in keys and not isinstance(rng, jax.core.Tracer):
                keys[path] = rng
            return init_fn(rng, *a, **kw)

        return original(scope, name, recorded, *args, unbox=unbox, **kwargs)

    flax_scope.Scope.param = param
    try:
        variables = model.init(key, x)
    finally:
        flax_scope.Scope.param = original
    return variables, keys


def leaf_record(path, value, written, rng):
    value = np.asarray(value)
    assert value.dtype == np.float32, (path, value.dtype)
    shape = tuple(value.shape)
    if isinstance(written, tuple):
        init, source = written
        assert init == "default"
    else:
        init, source = written, written
    spec = eval(source, {}, SPEC)  # noqa: S307 (our own table)
    ishape = init_shape(path, shape)

    if path.startswith("params/"):
        # Redraw with the described initialiser, on the described shape.
        fn = eval(source, {}, dict(vars(I)))  # noqa: S307
        redraw = np.asarray(jnp.reshape(fn(rng, ishape, jnp.float32), shape))
        assert np.array_equal(redraw, value), f"{path}: redraw of {source} on {ishape} differs"

    v = value.astype(np.float64)
    n = int(v.size)
    rec = {"shape": list(shape), "n": n, "mean": float(v.mean()), "std": float(v.std()),
           "min": float(v.min()), "max": float(v.max()), "init": init}
    if init == "default":
        rec["default_init"] = source
    rec["kind"] = spec["kind"]
    if spec["kind"] == "variance_scaling":
        rec.update(scale=spec["scale"], mode=spec["mode"], distribution=spec["distribution"],
                   in_axis=spec["in_axis"], out_axis=spec["out_axis"])
    rec["init_shape"] = list(ishape)
    rec.update(expected(spec, ishape))
    if spec["kind"] == "orthogonal":
        m = v.reshape(-1, shape[-1])
        g = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
        rec["orthogonality_error"] = float(np.abs(g - spec["scale"] ** 2 * np.eye(g.shape[0])).max())
        assert rec["orthogonality_error"] < 1e-5, (path, rec["orthogonality_error"])
    check(path, rec)
    return rec


def check(path, rec):
    if rec["exact"] is not None:
        assert rec["min"] == rec["max"] == float(np.float32(rec["exact"])), path
        return
    n = rec["n"]
    lo_hi = rec["support"]
    if lo_hi is not None:
        lo, hi = lo_hi
        slack = 1e-6 * max(abs(lo), abs(hi))  # the bounds are float64, the draws float32 products
        assert lo - slack <= rec["min"] and rec["max"] <= hi + slack, (path, rec["min"], rec["max"], lo_hi)
    sd = rec["expected_std"]
    if sd is not None:
        assert abs(rec["mean"] - rec["expected_mean"]) <= 6.0 * sd / math.sqrt(n), (path, rec["mean"])
        assert abs(rec["std"] / sd - 1.0) <= 6.0 / math.sqrt(n), (path, rec["std"], sd)


def accepts(mode, distribution):
    try:
        I.variance_scaling(1.0, mode, distribution)(jax.random.PRNGKey(0), (4, 3), jnp.float32)
        return True
    except ValueError:
        return False


def build():
    out = {
        "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
                     "numpy": np.__version__},
        "variance_scaling_accepts": {
            "untruncated_normal": accepts("fan_in", "untruncated_normal"),
            "fan_geo_avg": accepts("fan_geo_avg", "normal"),
        },
        "models": [m.__name__ for m, _, _ in MODELS],
    }
    assert out["variance_scaling_accepts"] == {"untruncated_normal": False, "fan_geo_avg": True}
    root = jax.random.PRNGKey(0)
    for i, (model, x, table) in enumerate(MODELS):
        variables, keys = init_recording(model(), jax.random.fold_in(root, i), x)
        leaves = {"/".join(p): v for p, v in flat(variables).items()}
        missing, extra = set(table) - set(leaves), set(leaves) - set(table)
        assert not missing and not extra, (model.__name__, sorted(missing), sorted(extra))
        assert set(keys) == {p for p in leaves if p.startswith("params/")}, model.__name__
        recs = {}
        for path in sorted(leaves):
            recs[path] = leaf_record(path, leaves[path], table[path], keys.get(path))
        out[model.__name__] = recs
        print(f"{model.__name__}: {len(recs)} leaves")
        for path, r in recs.items():
            fans = f" fans ({r['fan_in']:g}, {r['fan_out']:g})" if r["fan_in"] is not None else ""
            print(f"  {path} {tuple(r['shape'])} {r['init']}"
                  f"{' = ' + r['default_init'] if r['init'] == 'default' else ''}{fans}")
    return out


if __name__ == "__main__":
    write("flax_inits.json", build())
