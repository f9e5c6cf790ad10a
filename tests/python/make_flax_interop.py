"""Writes the fixture of tests/interop_flax.rs:

- tests/fixtures/flax_interop.msgpack: the variables of a small Flax CNN
  (Conv, BatchNorm, Dense) trained 5 SGD steps on random data, saved as a
  Flax user saves them:
  `flax.serialization.to_bytes({"params": ..., "batch_stats": ...})`;
- tests/fixtures/flax_interop.json: a batch `x` (NCHW) and the model's
  logits on it in inference mode (BatchNorm on its running statistics);
- tests/fixtures/flax_interop_digits.msgpack: the same model trained 300
  SGD steps on the training split of the embedded 8x8 digits (the split of
  `flaxen_runtime::data::digits`, recomputed here), and
  tests/fixtures/flax_interop_digits.json: the test split's labels, the
  class Flax predicts for each test digit, and how many of the 297 it
  classifies right.

    /tmp/venv/bin/python tests/python/make_flax_interop.py

jax 0.10.2, flax 0.12.8, numpy 2.4.6 made the committed files (Python 3.11).
Everything is float32, as a Flax user trains. The model flattens its
feature map in NCHW order (a transpose before the reshape), the order in
which flaxen's `flatten` reads it, so that the Dense kernel after it maps
one to one.
"""

import gzip
import json
import pathlib

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from flax_keys import arr

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
OUT = ROOT / "tests" / "fixtures"
ASSETS = ROOT / "runtime" / "src" / "data" / "assets"
M64 = (1 << 64) - 1
rng = np.random.default_rng(20261201)


class Cnn(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Conv(8, (3, 3))(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train)(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        # NHWC -> NCHW before flattening: flaxen's `flatten` order.
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(16)(x))
        return nn.Dense(10)(x)


def nhwc(x):
    return jnp.asarray(np.transpose(x, (0, 2, 3, 1)))


def main():
    model = Cnn()
    xs = rng.standard_normal((5, 8, 1, 8, 8)).astype(np.float32)
    ys = rng.integers(0, 10, (5, 8))
    variables = model.init(jax.random.PRNGKey(0), nhwc(xs[0]), train=False)
    params, stats = variables["params"], variables["batch_stats"]

    def loss_fn(params, stats, x, y):
        logits, new = model.apply(
            {"params": params, "batch_stats": stats}, x, train=True, mutable=["batch_stats"]
        )
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))
        return loss, new["batch_stats"]

    grad = jax.jit(jax.grad(loss_fn, has_aux=True))
    for x, y in zip(xs, ys):
        g, stats = grad(params, stats, nhwc(x), jnp.asarray(y))
        params = jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g)

    x = rng.standard_normal((4, 1, 8, 8)).astype(np.float32)
    logits = model.apply({"params": params, "batch_stats": stats}, nhwc(x), train=False)
    blob = flax.serialization.to_bytes({"params": params, "batch_stats": stats})
    # What flaxen writes back must read the same way.
    back = flax.serialization.msgpack_restore(blob)
    assert back["params"]["Conv_0"]["kernel"].shape == (3, 3, 1, 8)

    (OUT / "flax_interop.msgpack").write_bytes(blob)
    with open(OUT / "flax_interop.json", "w") as f:
        json.dump({"x": arr(x), "logits": arr(np.asarray(logits))}, f)
        f.write("\n")


def splitmix(state):
    """One SplitMix64 step: (new state, output), as flaxen's data/rng.rs."""
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def permutation(n, seed, epoch):
    """flaxen's `rng::permutation`: Fisher-Yates over SplitMix64."""
    _, mixed = splitmix(epoch)
    state = mixed ^ seed
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = (-bound) % bound
        while True:
            state, r = splitmix(state)
            m = r * bound
            if (m & M64) >= threshold:
                break
        j = m >> 64
        order[i], order[j] = order[j], order[i]
    return order


def digits():
    """The embedded digits, NCHW in [0, 1], split as flaxen splits them."""
    images = np.frombuffer(gzip.decompress((ASSETS / "digits-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
    labels = np.frombuffer(gzip.decompress((ASSETS / "digits-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
    x = (images.reshape(-1, 1, 8, 8) / 16.0).astype(np.float32)
    order = permutation(len(labels), 0, 0)
    train, test = order[:1500], order[1500:]
    return (x[train], labels[train].astype(np.int32)), (x[test], labels[test].astype(np.int32))


def train_on_digits():
    model = Cnn()
    (xtr, ytr), (xte, yte) = digits()
    variables = model.init(jax.random.PRNGKey(1), nhwc(xtr[:8]), train=False)
    params, stats = variables["params"], variables["batch_stats"]

    def loss_fn(params, stats, x, y):
        logits, new = model.apply(
            {"params": params, "batch_stats": stats}, x, train=True, mutable=["batch_stats"]
        )
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))
        return loss, new["batch_stats"]

    grad = jax.jit(jax.grad(loss_fn, has_aux=True))
    order = np.random.default_rng(1).permutation(np.tile(np.arange(1500), 13))
    for step in range(300):
        idx = order[step * 64:(step + 1) * 64]
        g, stats = grad(params, stats, nhwc(xtr[idx]), jnp.asarray(ytr[idx]))
        params = jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g)
    logits = model.apply({"params": params, "batch_stats": stats}, nhwc(xte), train=False)
    correct = int(np.sum(np.argmax(np.asarray(logits), 1) == yte))
    (OUT / "flax_interop_digits.msgpack").write_bytes(
        flax.serialization.to_bytes({"params": params, "batch_stats": stats})
    )
    with open(OUT / "flax_interop_digits.json", "w") as f:
        predictions = [int(v) for v in np.argmax(np.asarray(logits), 1)]
        json.dump({"test_labels": [int(v) for v in yte], "test_correct": correct,
                   "test_predictions": predictions}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
    train_on_digits()
