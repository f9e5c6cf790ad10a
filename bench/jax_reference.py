"""JAX/Flax/Optax reference for examples/bench_layers.rs: the same W1 and W2
workloads (batch 32, 1x28x28 inputs, Adam lr 1e-3, softmax cross-entropy
with integer labels on random data), in JAX's two CPU modes:

- "step": one jitted training step per call (the textbook loop);
- "scan": `lax.scan` over K=5 stacked batches with `unroll=True` in one
  jitted call (XLA:CPU's fastest mode for these models; a rolled scan is
  several times slower there).

Each mode is timed over a window of seconds after a warmup, and a 2048x2048
f32 matmul (jitted) gives the machine's ceiling in the same run. Prints one
JSON line per (workload, mode), then one for the matmul.

    pip install -r tests/python/requirements.txt
    python3 bench/jax_reference.py [--quick] [--only W2] [--seconds 3]
"""

import json
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

BATCH = 32
K = 5
# Training FLOPs per sample, as in the Rust bench (forward 2*MACs, weight and
# input gradients twice that, less the first layer's input gradient).
FLOPS = {"W1": 1.279488e6, "W2": 27.411456e6}


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


def timed(run, seconds, warmup):
    """Calls `run()` (which blocks) until `seconds` have passed; returns
    (calls, elapsed)."""
    for _ in range(warmup):
        run()
    calls, start = 0, time.perf_counter()
    while True:
        run()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls, elapsed


def report(name, mode, samples, secs, extra=None):
    sps = samples / secs
    line = {
        "workload": name, "framework": "jax", "mode": mode, "batch": BATCH,
        "samples_per_s": round(sps), "gflop_per_s": round(sps * FLOPS[name] / 1e9, 1),
        "step_ms": round(secs * 1e3 * BATCH / samples, 3),
    }
    line.update(extra or {})
    print(json.dumps(line), flush=True)


def bench(name, model, seconds, warmup):
    key = jax.random.PRNGKey(0)
    xs = jax.random.normal(key, (K, BATCH, 28, 28, 1))
    ys = jax.random.randint(key, (K, BATCH), 0, 10)
    params = model.init(key, xs[0])
    tx = optax.adam(1e-3)

    def train_step(carry, batch):
        params, opt_state = carry
        x, y = batch

        def loss_fn(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), loss

    step = jax.jit(train_step)
    scan = jax.jit(lambda c, b: jax.lax.scan(train_step, c, b, unroll=True))

    state = [(params, tx.init(params)), 0]

    def run_step():
        carry, i = state
        carry, loss = step(carry, (xs[i % K], ys[i % K]))
        loss.block_until_ready()
        state[0], state[1] = carry, i + 1

    calls, secs = timed(run_step, seconds, warmup)
    report(name, "step", calls * BATCH, secs)

    state[0] = (params, tx.init(params))

    def run_scan():
        carry, losses = scan(state[0], (xs, ys))
        losses.block_until_ready()
        state[0] = carry

    calls, secs = timed(run_scan, seconds, max(1, warmup // K))
    report(name, "scan", calls * K * BATCH, secs, {"k": K, "unroll": True})


def matmul_ceiling(seconds):
    """GFLOP/s of a jitted 2048x2048 f32 matmul: the machine's limit as XLA
    reaches it."""
    n = 2048
    a = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(2), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    calls, secs = timed(lambda: mm(a, b).block_until_ready(), seconds, 3)
    print(json.dumps({
        "workload": "MATMUL2048", "framework": "jax", "mode": "matmul",
        "gflop_per_s": round(2 * n**3 * calls / secs / 1e9, 1),
        "ms": round(secs * 1e3 / calls, 3),
    }), flush=True)


def main():
    args = sys.argv[1:]
    quick = "--quick" in args
    only = args[args.index("--only") + 1] if "--only" in args else None
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 3.0
    if quick:
        seconds = 0.2
    warmup = 10
    if only in (None, "W1"):
        bench("W1", W1(), seconds, warmup)
    if only in (None, "W2"):
        bench("W2", W2(), seconds, warmup)
    if only in (None, "MATMUL"):
        matmul_ceiling(seconds)


if __name__ == "__main__":
    main()
