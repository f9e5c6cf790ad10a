"""Writes the fixture of tests/interop_flax.rs:

- tests/fixtures/flax_interop.msgpack: the variables of a small Flax CNN
  (Conv, BatchNorm, Dense) trained 5 SGD steps on random data, saved as a
  Flax user saves them:
  `flax.serialization.to_bytes({"params": ..., "batch_stats": ...})`;
- tests/fixtures/flax_interop.json: a batch `x` (NCHW) and the model's
  logits on it in inference mode (BatchNorm on its running statistics).

    /tmp/venv/bin/python tests/python/make_flax_interop.py

jax 0.10.2, flax 0.12.8, numpy 2.4.6 made the committed files (Python 3.11).
Everything is float32, as a Flax user trains. The model flattens its
feature map in NCHW order (a transpose before the reshape), the order in
which flaxen's `flatten` reads it, so that the Dense kernel after it maps
one to one.
"""

import json
import pathlib

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from flax_keys import arr

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
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


if __name__ == "__main__":
    main()
