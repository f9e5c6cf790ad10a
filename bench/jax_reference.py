"""JAX/Flax/Optax reference for examples/bench_layers.rs: the same W1 and W2
workloads (batch 32, 1x28x28 inputs, Adam lr 1e-3, softmax cross-entropy on
random data), one jit'd training step per call, timed after a warmup.
Prints one JSON line per workload with the same fields as the Rust bench.

    pip install jax flax optax
    python3 bench/jax_reference.py [--quick] [--only W2]
"""

import json
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

BATCH = 32
FLOPS = {"W1": 1.279488e6, "W2": 27.411456e6}  # per sample, as in the Rust bench


class W1(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        return nn.Dense(10)(x.reshape((x.shape[0], -1)))


class W2(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.relu(nn.Conv(64, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.relu(nn.Dense(256)(x.reshape((x.shape[0], -1))))
        return nn.Dense(10)(x)


def bench(name, model, warmup, steps):
    key = jax.random.PRNGKey(0)
    xs = jax.random.normal(key, (4, BATCH, 28, 28, 1))
    ys = jax.nn.one_hot(jax.random.randint(key, (4, BATCH), 0, 10), 10)
    params = model.init(key, xs[0])
    tx = optax.adam(1e-3)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, x, y):
        def loss_fn(p):
            return optax.softmax_cross_entropy(model.apply(p, x), y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    for i in range(warmup):
        params, opt_state, loss = step(params, opt_state, xs[i % 4], ys[i % 4])
    loss.block_until_ready()
    start = time.perf_counter()
    for i in range(steps):
        params, opt_state, loss = step(params, opt_state, xs[i % 4], ys[i % 4])
    loss.block_until_ready()
    secs = time.perf_counter() - start
    sps = BATCH * steps / secs
    print(json.dumps({
        "workload": name, "framework": "jax", "batch": BATCH,
        "samples_per_s": round(sps), "gflop_per_s": round(sps * FLOPS[name] / 1e9, 1),
        "step_ms": round(secs * 1e3 / steps, 3),
    }), flush=True)


def main():
    quick = "--quick" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    warmup, steps = (2, 5) if quick else (30, 300)
    if only in (None, "W1"):
        bench("W1", W1(), warmup, steps)
    if only in (None, "W2"):
        bench("W2", W2(), warmup, steps // 3)


if __name__ == "__main__":
    main()
