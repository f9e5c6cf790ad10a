"""JAX/Flax/Optax reference for examples/bench_layers.rs: the same five
training workloads (batch 32, Adam lr 1e-3, softmax cross-entropy), each a
Flax twin of flaxen's model:

- W1, W2: the small CNNs on random 28x28x1 inputs with integer labels;
- W3: W2's stem, then a depthwise conv, a dilated conv and a transposed
  conv (`feature_group_count`, `kernel_dilation`, `nn.ConvTranspose`);
- TEXT: the Transformer text classifier of examples/bench/attention.rs
  (Embed, padding mask, two pre-norm blocks with masked SelfAttention,
  a CLS head) on 64 token ids per sample;
- LSTM: the row-LSTM of examples/bench/rnn.rs (28 steps of 28 features,
  `nn.RNN(nn.LSTMCell(64), return_carry=True)`, Dense 10, one-hot labels);

in JAX's two CPU modes:

- "step": one jitted training step per call (the textbook loop);
- "scan": `lax.scan` over K=5 stacked batches with `unroll=True` in one
  jitted call (XLA:CPU's fastest mode for these models; a rolled scan is
  several times slower there).

Each mode is timed over a window of seconds after a warmup, and a 2048x2048
f32 matmul (jitted) gives the machine's ceiling in the same run. Prints one
JSON line per (workload, mode), then one for the matmul.

    pip install -r tests/python/requirements.txt
    python3 bench/jax_reference.py [--quick] [--only W2,TEXT] [--seconds 3]
    python3 bench/jax_reference.py --check [--only LSTM]

`--only` takes a comma list of W1 W2 W3 TEXT LSTM MATMUL. `--check` times
nothing: it prints each twin's parameter count and its loss over 20 steps,
to hold against flaxen's models.
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
WORKLOADS = ("W1", "W2", "W3", "TEXT", "LSTM")
# Training FLOPs per sample, as in the Rust bench (forward 2*MACs, weight and
# input gradients twice that, less the first layer's input gradient); only
# the products are counted, not the elementwise work.
# - W3: bench_layers.rs's train_flops over conv1, the depthwise conv (C=1
#   per group), the dilated conv (W2's Conv2 FLOPs), the transposed conv
#   (those of the conv it transposes, 2*64*16*9 per input cell, 14x14) and
#   the Dense 784 -> 10: 3 * 11.418176e6 - 0.451584e6.
# - TEXT: 3 * 2 * MACs (the first GEMM's input gradient is needed, it flows
#   to the embeddings): per block and token, the four 128x128 projections,
#   q.k^T and w.v (2 * 64 * 128) and the MLP (2 * 128 * 256), 64 tokens, two
#   blocks, plus the 128 -> 2 head:
#   3 * 2 * (2 * 64 * (4*128^2 + 2*64*128 + 2*128*256) + 128*2).
# - LSTM: rnn.rs's count for the LSTM, 3 * 2 * 4*(IN+H)*H*SEQ with IN=28,
#   H=64, SEQ=28 (it includes the input gradient of the input kernels), plus
#   the Dense 64 -> 10 at 3 * 2 * 64*10.
FLOPS = {
    "W1": 1.279488e6,
    "W2": 27.411456e6,
    "W3": 33.802944e6,
    "TEXT": 113.247744e6,
    "LSTM": 3.960576e6,
}


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


class W3(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.relu(nn.Conv(32, (3, 3), feature_group_count=32)(x))
        # SAME over the dilated 5x5 extent: 2 cells of padding each side.
        x = nn.relu(nn.Conv(64, (3, 3), kernel_dilation=(2, 2))(x))
        # Flax's default padding='SAME' pads the stride-dilated input (2, 1),
        # flaxen's ConvTranspose2D<.., 2, 1, 2, 1, 14, 14, 28, 28>: 14 -> 28.
        x = nn.relu(nn.ConvTranspose(16, (3, 3), strides=(2, 2))(x))
        x = nn.avg_pool(x, (4, 4), strides=(4, 4))
        # NHWC flattens (7, 7, 16) where flaxen's NCHW flattens (16, 7, 7):
        # the Dense's rows in another order, the same maths.
        return nn.Dense(10)(x.reshape((x.shape[0], -1)))


class TextBlock(nn.Module):
    """One pre-norm encoder block (no dropout: flaxen's has none)."""

    @nn.compact
    def __call__(self, x, mask):
        x = x + nn.SelfAttention(num_heads=4)(nn.LayerNorm()(x), mask=mask)
        y = nn.Dense(256)(nn.LayerNorm()(x))
        return x + nn.Dense(128)(nn.gelu(y))


class Text(nn.Module):
    """Token ids (0 = padding) to two logits."""

    @nn.compact
    def __call__(self, tokens):
        mask = nn.make_attention_mask(tokens > 0, tokens > 0)
        x = nn.Embed(1000, 128)(tokens)
        for _ in range(2):
            x = TextBlock()(x, mask)
        return nn.Dense(2)(nn.LayerNorm()(x)[:, 0])


class Lstm(nn.Module):
    @nn.compact
    def __call__(self, x):
        # The carry of an LSTMCell is (c, h); the classifier reads h.
        (_, h), _ = nn.RNN(nn.LSTMCell(64), return_carry=True)(x)
        return nn.Dense(10)(h)


def int_ce(logits, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def onehot_ce(logits, y):
    # dfdx's cross_entropy_with_logits_loss: the batch mean of softmax CE
    # against float (here one-hot) targets.
    return optax.softmax_cross_entropy(logits, y).mean()


def data(name, key):
    """K stacked batches (inputs, labels) and the loss, as flaxen's bench
    builds them."""
    kx, ky = jax.random.split(key)
    if name in ("W1", "W2", "W3"):
        xs = jax.random.normal(kx, (K, BATCH, 28, 28, 1))
        return xs, jax.random.randint(ky, (K, BATCH), 0, 10), int_ce
    if name == "TEXT":
        # attention.rs: ids 1 + (i*7919) % 999, with row b's last b % 16
        # tokens padding (0); labels i % 2. Batch 0 is exactly flaxen's,
        # the other K-1 draw random ids on the same padding pattern (the
        # same work: the mask, not the ids, shapes the compute).
        i = jnp.arange(BATCH * 64)
        keep = (i % 64 < 64 - (i // 64) % 16).reshape(BATCH, 64)
        ids = (1 + (i * 7919) % 999).reshape(BATCH, 64)
        rand = jax.random.randint(kx, (K - 1, BATCH, 64), 1, 1000)
        xs = jnp.where(keep, jnp.concatenate([ids[None], rand]), 0).astype(jnp.int32)
        ys = jnp.broadcast_to(jnp.arange(BATCH) % 2, (K, BATCH))
        return xs, ys, int_ce
    if name == "LSTM":
        # rnn.rs: sample b's one-hot label is class (7 b) % 10.
        xs = jax.random.normal(kx, (K, BATCH, 28, 28))
        y = jax.nn.one_hot(jnp.arange(BATCH) * 7 % 10, 10)
        return xs, jnp.broadcast_to(y, (K, BATCH, 10)), onehot_ce
    raise ValueError(name)


MODELS = {"W1": W1, "W2": W2, "W3": W3, "TEXT": Text, "LSTM": Lstm}


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
        "samples_per_s": round(sps),
    }
    if name in FLOPS:
        line["gflop_per_s"] = round(sps * FLOPS[name] / 1e9, 1)
    line["step_ms"] = round(secs * 1e3 * BATCH / samples, 3)
    line.update(extra or {})
    print(json.dumps(line), flush=True)


def setup(name):
    """The model's initial (params, opt_state), its stacked batches, and its
    training step `(carry, batch) -> (carry, loss)`."""
    key = jax.random.PRNGKey(0)
    model = MODELS[name]()
    xs, ys, loss = data(name, key)
    params = model.init(key, xs[0])
    tx = optax.adam(1e-3)

    def train_step(carry, batch):
        params, opt_state = carry
        x, y = batch

        def loss_fn(p):
            return loss(model.apply(p, x), y)

        loss_val, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), loss_val

    return (params, tx.init(params)), xs, ys, train_step


def bench(name, seconds, warmup):
    init, xs, ys, train_step = setup(name)
    step = jax.jit(train_step)
    scan = jax.jit(lambda c, b: jax.lax.scan(train_step, c, b, unroll=True))

    state = [init, 0]

    def run_step():
        carry, i = state
        carry, loss = step(carry, (xs[i % K], ys[i % K]))
        loss.block_until_ready()
        state[0], state[1] = carry, i + 1

    calls, secs = timed(run_step, seconds, warmup)
    report(name, "step", calls * BATCH, secs)

    state[0] = init

    def run_scan():
        carry, losses = scan(state[0], (xs, ys))
        losses.block_until_ready()
        state[0] = carry

    calls, secs = timed(run_scan, seconds, max(1, warmup // K))
    report(name, "scan", calls * K * BATCH, secs, {"k": K, "unroll": True})


def check(name, steps=20):
    """The twin's parameter count and its loss at the first and last of
    `steps` jitted steps on its first batch (it should fall)."""
    carry, xs, ys, train_step = setup(name)
    step = jax.jit(train_step)
    params = carry[0]
    losses = []
    for _ in range(steps):
        carry, loss = step(carry, (xs[0], ys[0]))
        losses.append(float(loss))
    print(json.dumps({
        "workload": name, "framework": "jax", "mode": "check",
        "params": sum(p.size for p in jax.tree_util.tree_leaves(params)),
        "shapes": jax.tree_util.tree_map(lambda p: list(p.shape), params)["params"],
        "loss_first": round(losses[0], 4), f"loss_{steps}": round(losses[-1], 4),
    }), flush=True)


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
    only = args[args.index("--only") + 1].split(",") if "--only" in args else None
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 3.0
    if quick:
        seconds = 0.2
    warmup = 10
    for name in only or (*WORKLOADS, "MATMUL"):
        if name == "MATMUL":
            if "--check" not in args:
                matmul_ceiling(seconds)
        elif name not in MODELS:
            sys.exit(f"--only takes a comma list of {', '.join(WORKLOADS)}, MATMUL; not {name}")
        elif "--check" in args:
            check(name)
        else:
            bench(name, seconds, warmup)


if __name__ == "__main__":
    main()
