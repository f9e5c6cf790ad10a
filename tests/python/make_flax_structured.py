"""Writes the fixtures of tests/interop_structured.rs: Flax checkpoints of
models written as Flax users write them (NHWC images, `@nn.compact`,
explicit and automatic names), saved exactly as
`flax.serialization.to_bytes(variables)` returns them, with their outputs
and gradients.

    /tmp/venv/bin/python tests/python/make_flax_structured.py [OUTDIR]

writes into tests/fixtures/, or into OUTDIR to compare a fresh run with the
committed files. jax 0.10.2, jaxlib 0.10.2, flax 0.12.8, numpy 2.4.6,
msgpack 1.2.4 made the committed files (Python 3.11; requirements.txt).

Every model is initialised from a fixed `PRNGKey`, then every parameter
is perturbed, `p + 0.1 * N(0, 1)` from a seeded numpy generator (zero
biases and unit norm scales included, through boxes too), so that no leaf
is zero or an identity. Everything is float32.

In each JSON: inputs in flaxen's layout (images NCHW, transposed to NHWC
here before Flax sees them; sequences [B, seq, features]); "grads", when
present, the gradient of the fixture's scalar loss with respect to every
parameter, keyed by the Flax path joined with "/" and collection first
("params/Conv_0/kernel"), in Flax's own layout; "paths", the sorted "/"
paths of every leaf of the saved msgpack; "num_params", the number of
parameters. Arrays are `{"shape": [...], "data": [flat row-major]}`
(`flax_keys.arr`).

1. flax_seed_nhwc.{msgpack,json}: the seed CNN on NHWC 28x28x1 images,
   Conv(32,3x3) relu avg_pool2 Conv(64,3x3) relu avg_pool2, flattened in
   NHWC order (`x.reshape((x.shape[0], -1))`, no transpose, so Dense_0's
   kernel rows run over (h, w, c) with c fastest), Dense(256) relu
   Dense(10). Trained 3 plain SGD steps (lr 0.5, random normal batches of
   8, random labels, mean softmax cross-entropy) before the perturbation.
   JSON: "x" [4,1,28,28], "labels", "logits" [4,10], "loss" (mean softmax
   cross-entropy), "grads" (all but `Dense_0/kernel`), and of that kernel's
   gradient the rows "dense_0_kernel_grad_rows" (every 49th) as
   "dense_0_kernel_grad".

2. flax_named.{msgpack,json}: explicit names (`stem`, `block2`, `conv1`,
   `gn1`, `fc`, `pre_norm`, `encoder_norm`, `head`), a user module named
   automatically (`ResUnit_0`), GroupNorm (4 groups: `scale`, `bias`),
   RMSNorm (`scale` only), ConvTranspose (2x2, stride 2, "SAME": kernel
   (2, 2, in, out) and `bias`, `ConvTranspose_0`), LayerNorm, all with
   Flax's default epsilon 1e-6. Flax's ConvTranspose (transpose_kernel
   False) does not flip its kernel as PyTorch's does: here
   out[2i+a, 2j+b, o] = bias[o] + sum_c x[i, j, c] kernel[1-a, 1-b, c, o]. `head`'s kernel is boxed
   (`nn.with_logical_partitioning`, a `LogicallyPartitioned`); to_bytes
   writes the box as a dict holding its array, so the msgpack has the leaf
   `params/head/kernel/value` (32, 10), not `params/head/kernel` (the
   names, mesh and rules of the box are not saved). The forward and the
   gradient use the boxed variables as they are (Flax unboxes at apply);
   the gradient of the boxed kernel is keyed by the unboxed path
   `params/head/kernel`. JSON: "x" [3,3,8,8], "out" [3,10], "w" [3,10],
   "loss" = sum(out * w), "grads".

3. flax_encdec.{msgpack,json}: Dense relu, `nn.RNN(nn.LSTMCell(16),
   name="encoder")` over the 5 source steps, then a nested block
   (`CrossBlock_0`) whose second input is the float memory: LayerNorm,
   cross attention (2 heads of 8; query from the target, key and value
   from the memory), residual, LayerNorm, Dense(32), gelu (nn.gelu's
   default, the tanh approximation), Dense(16), residual; Dense(3) on the
   first target step. The LSTM cell is built inside `EncDec.__call__`, so
   it belongs to EncDec, not to the RNN: its parameters are at
   `params/LSTMCell_0/{ii,if,ig,io}/kernel` (no bias) and
   `params/LSTMCell_0/{hi,hf,hg,ho}/{kernel,bias}`, and the name "encoder"
   appears nowhere in the checkpoint. JSON: "src" [2,5,16], "tgt" [2,6,16],
   "out" [2,3], "w" [2,3], "loss" = sum(out * w), "grads", "grad_src",
   "grad_tgt". The key bias adds the same score to every key of a query,
   which the softmax cancels: its gradient is zero but for rounding
   (about 1e-7 here).

4. flax_user_names.{msgpack,json}: user module types whose class names
   hold acronyms, named automatically by Flax from the class name as it
   is: `DecoderLSTMCell_0`, `DecoderLSTMCell_1`, `MLPHead_0`, each holding
   `Dense_0`. JSON: "x" [3,12], "out" [3,4].

5. flax_dense_channels.{msgpack,json}: `nn.Dense` applied to an NHWC map,
   as Flax users write it after a conv: Conv(6, (3,3)) relu, Dense(5) on
   the channels (`Dense_0`, kernel (6, 5)), relu, avg_pool 2x2, reshape
   NHWC, Dense(3). JSON: "x" NCHW [2,3,6,6], "out" [2,3], "w", "loss",
   "grads".
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.traverse_util import flatten_dict

from fixture_out import normal, out_dir, save
from flax_keys import arr


class SeedCnn(nn.Module):
    @nn.compact
    def __call__(self, x):  # [B, 28, 28, 1]
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.relu(nn.Conv(64, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(10)(x)


class ResUnit(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        y = nn.Conv(self.features, (3, 3), use_bias=False, name="conv1")(x)
        y = nn.GroupNorm(num_groups=4, name="gn1")(y)
        return nn.relu(x + y)


class Named(nn.Module):
    @nn.compact
    def __call__(self, x):  # [B, 8, 8, 3]
        x = nn.Conv(8, (3, 3), name="stem")(x)
        x = ResUnit(8)(x)
        x = ResUnit(8, name="block2")(x)
        x = nn.ConvTranspose(4, (2, 2), strides=(2, 2))(x)  # [B, 16, 16, 4]
        x = nn.avg_pool(x, (4, 4), strides=(4, 4))  # [B, 4, 4, 4]
        x = x.reshape((x.shape[0], -1))  # 64
        x = nn.Dense(32, name="fc")(x)
        x = nn.RMSNorm(name="pre_norm")(x)
        x = nn.LayerNorm(name="encoder_norm")(x)
        kernel_init = nn.with_logical_partitioning(nn.linear.default_kernel_init, ("embed", "vocab"))
        return nn.Dense(10, name="head", kernel_init=kernel_init)(x)


class CrossBlock(nn.Module):
    @nn.compact
    def __call__(self, x, mem):  # [B, 6, 16], [B, 5, 16]
        h = nn.LayerNorm()(x)
        h = nn.MultiHeadDotProductAttention(num_heads=2)(h, mem)
        x = x + h
        h = nn.Dense(32)(nn.LayerNorm()(x))
        return x + nn.Dense(16)(nn.gelu(h))


class EncDec(nn.Module):
    @nn.compact
    def __call__(self, src, tgt):  # [B, 5, 16], [B, 6, 16]
        mem = nn.relu(nn.Dense(16)(src))
        mem = nn.RNN(nn.LSTMCell(16), name="encoder")(mem)
        y = CrossBlock()(tgt, mem)
        return nn.Dense(3)(y[:, 0])


class DecoderLSTMCell(nn.Module):
    @nn.compact
    def __call__(self, x):  # [B, 12]
        return nn.tanh(nn.Dense(12)(x))


class MLPHead(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(4)(x)


class Top(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = DecoderLSTMCell()(x)
        x = DecoderLSTMCell()(x)
        return MLPHead()(x)


def nhwc(x):
    return jnp.asarray(np.transpose(x, (0, 2, 3, 1)))


def perturb(variables, rng):
    """Every leaf plus 0.1 * N(0, 1); boxes keep their metadata."""
    return jax.tree_util.tree_map(lambda p: p + 0.1 * normal(rng, p.shape), variables)


def cross_entropy(logits, labels):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))


def grads_by_path(grads):
    """{"params/.../leaf": arr} of a gradient tree, boxes unboxed."""
    return {k: arr(v) for k, v in sorted(flatten_dict(nn.unbox(grads), sep="/").items())}


def seed_nhwc(out):
    rng = np.random.default_rng(20261211)
    model = SeedCnn()
    params = model.init(jax.random.PRNGKey(11), jnp.zeros((8, 28, 28, 1)))["params"]

    def loss_fn(params, x, y):
        return cross_entropy(model.apply({"params": params}, x), y)

    grad = jax.jit(jax.grad(loss_fn))
    for _ in range(3):
        x = jnp.asarray(normal(rng, (8, 28, 28, 1)))
        y = jnp.asarray(rng.integers(0, 10, 8))
        params = jax.tree_util.tree_map(lambda p, d: p - 0.5 * d, params, grad(params, x, y))
    variables = perturb({"params": params}, rng)

    x = normal(rng, (4, 1, 28, 28))
    labels = rng.integers(0, 10, 4)

    def loss_vars(variables):
        logits = model.apply(variables, nhwc(x))
        return cross_entropy(logits, jnp.asarray(labels)), logits

    (loss, logits), grads = jax.value_and_grad(loss_vars, has_aux=True)(variables)
    grads = grads_by_path(grads)
    # Dense_0's kernel gradient has 802,816 values; every 49th of its
    # (h, w, c) rows (64 rows, every channel residue) keeps the fixture small
    # and still pins the flatten order of the backward pass.
    full = np.asarray(grads.pop("params/Dense_0/kernel")["data"], np.float32).reshape(3136, 256)
    rows = list(range(0, 3136, 49))
    save(out, "flax_seed_nhwc", variables, {
        "x": arr(x),
        "labels": [int(v) for v in labels],
        "logits": arr(logits),
        "loss": float(loss),
        "grads": grads,
        "dense_0_kernel_grad_rows": rows,
        "dense_0_kernel_grad": arr(full[rows]),
    })


def named(out):
    rng = np.random.default_rng(20261212)
    model = Named()
    x = normal(rng, (3, 3, 8, 8))
    w = normal(rng, (3, 10))
    variables = perturb(model.init(jax.random.PRNGKey(12), nhwc(x)), rng)
    assert isinstance(variables["params"]["head"]["kernel"], nn.LogicallyPartitioned)

    def loss_fn(variables):
        y = model.apply(variables, nhwc(x))
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables)
    save(out, "flax_named", variables, {
        "x": arr(x),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": grads_by_path(grads),
    })


def encdec(out):
    rng = np.random.default_rng(20261213)
    model = EncDec()
    src = normal(rng, (2, 5, 16))
    tgt = normal(rng, (2, 6, 16))
    w = normal(rng, (2, 3))
    variables = perturb(model.init(jax.random.PRNGKey(13), src, tgt), rng)

    def loss_fn(variables, src, tgt):
        y = model.apply(variables, src, tgt)
        return jnp.sum(y * w), y

    (loss, y), (grads, grad_src, grad_tgt) = jax.value_and_grad(
        loss_fn, argnums=(0, 1, 2), has_aux=True
    )(variables, jnp.asarray(src), jnp.asarray(tgt))
    save(out, "flax_encdec", variables, {
        "src": arr(src),
        "tgt": arr(tgt),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": grads_by_path(grads),
        "grad_src": arr(grad_src),
        "grad_tgt": arr(grad_tgt),
    })


def user_names(out):
    rng = np.random.default_rng(20261214)
    model = Top()
    x = normal(rng, (3, 12))
    variables = perturb(model.init(jax.random.PRNGKey(14), x), rng)
    y = model.apply(variables, x)
    save(out, "flax_user_names", variables, {"x": arr(x), "out": arr(y)})


class DenseChannels(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(6, (3, 3))(x))
        x = nn.relu(nn.Dense(5)(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        return nn.Dense(3)(x)


def dense_channels(out):
    rng = np.random.default_rng(20261215)
    model = DenseChannels()
    x = normal(rng, (2, 3, 6, 6))
    w = normal(rng, (2, 3))
    variables = perturb(model.init(jax.random.PRNGKey(15), nhwc(x)), rng)

    def loss_fn(variables):
        y = model.apply(variables, nhwc(x))
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables)
    save(out, "flax_dense_channels", variables, {
        "x": arr(x),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": grads_by_path(grads),
    })


def main():
    out = out_dir()
    seed_nhwc(out)
    named(out)
    encdec(out)
    user_names(out)
    dense_channels(out)


if __name__ == "__main__":
    main()
