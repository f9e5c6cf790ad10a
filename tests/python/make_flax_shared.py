"""Writes the fixture of tests/compact_shared.rs: Flax's semantics of a
layer bound once and applied several times, and of `Embed.attend` (tied
input and output embeddings), as a Flax checkpoint saved exactly as
`flax.serialization.to_bytes(variables)` returns it, with its output and
gradients in float32 and float64.

    /tmp/venv/bin/python tests/python/make_flax_shared.py [OUTDIR]

writes tests/fixtures/flax_shared.{msgpack,json}, or those files in OUTDIR
to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, numpy 2.4.6, msgpack 1.2.4 made the committed files
(Python 3.11; requirements.txt). The float64 results come from a second
run of the script in a process of its own (`fixture_out.main_f64`), since
`jax_enable_x64` is process-wide.

The model, `Tied`:

    embed = nn.Embed(20, 8)          # Embed_0
    x = embed(tokens)                # [b, 6, 8]
    dense = nn.Dense(8)              # Dense_0
    x = dense(nn.relu(dense(x)))     # one kernel, applied twice
    norm = nn.LayerNorm()            # LayerNorm_0
    x = norm(x) + norm(x * 2.0)
    head = nn.Dense(8, name="head")  # named, applied once
    x = head(x)
    return embed.attend(x)           # [b, 6, 20]: x @ embedding.T

What Flax does with it:

- A submodule built once in `@nn.compact` and called several times is one
  module with one set of parameters: the checkpoint holds `Dense_0` and
  `LayerNorm_0` once each, and the gradient of each of their leaves is the
  sum of the gradients of every call (two calls each here). Names are
  given when the module is built, not when it is called: the second call
  of `dense` makes no `Dense_1`, and `head`, named explicitly, takes no
  automatic number (the automatic names are `Embed_0`, `Dense_0`,
  `LayerNorm_0`).
- `Embed.__call__` is `jnp.take(embedding, tokens, axis=0)` (tokens must
  be integers; ids outside 0 .. 19 are not checked, Flax documents NaN
  for them); its gradient adds into the rows of the ids looked up, once
  per occurrence (repeated ids accumulate). `Embed.attend(x)` is
  `jnp.dot(x, embedding.T)`, no bias: the output layer uses the same
  `params/Embed_0/embedding` (20, 8), and adds to its gradient, at every
  position, the outer product of d loss / d out (20) and that position's
  x (8, `head`'s output), in every row, looked up or not. So the embedding's gradient is the lookup's
  scatter-add plus the attend's outer products; the rows of ids absent
  from "tokens" hold the second term only.
- `nn.Dense(8)`: y = x @ kernel + bias, kernel (in, out) = (8, 8), on the
  last axis of [b, 6, 8]. relu between the two calls of `Dense_0`.
- `nn.LayerNorm()`: over the last axis, epsilon 1e-6, `scale` and `bias`
  (8,), and Flax's default `use_fast_variance=True`: var = max(0,
  mean(x^2) - mean(x)^2) (then (x - mean) / sqrt(var + 1e-6) * scale +
  bias). norm(2x) is not norm(x): epsilon weighs four times less against
  the variance of 2x.

Parameters are initialised from `PRNGKey(51)`, then perturbed by
`fixture_out.perturb` (`p + 0.1 * N(0, 1)`, so zero biases and unit
LayerNorm scales hide nothing) from `np.random.default_rng(20261251)`,
after "tokens" and "w" are drawn from that generator. Everything saved is
float32.

In flax_shared.json (arrays are `{"shape": [...], "data": [flat
row-major]}`, `flax_keys.arr`):

- "tokens" [3, 6]: the token ids (integers stored as floats),
  `integers(0, 20, (3, 6))`; given to Flax as int32;
- "out" [3, 6, 20]: the output (the tied logits);
- "w" [3, 6, 20]: a fixed standard normal array; "loss" = sum(out * w);
- "grads": d loss / d params keyed "params/<path>"
  ("params/Dense_0/kernel"), in Flax's own layouts ((in, out) kernels,
  the (20, 8) embedding);
- "out_f64", "loss_f64", "grads_f64": the same in float64, on the float32
  checkpoint's values widened (w widened likewise), for a float64 port to
  be held to at 1e-9;
- "paths": the sorted "/" paths of every leaf of the msgpack;
  "num_params": 320 (embedding 160, Dense_0 72, LayerNorm_0 16, head 72).

The float64 pass also checks the description above outside Flax: a
plain numpy float64 forward written from it matches "out_f64" (1.8e-15
here); the same written in jax.numpy, differentiated, matches
"grads_f64" (4.3e-14); and with the embedding passed to it twice, once
for the lookup and once for attend, the two gradients add up to Flax's
embedding gradient (1.4e-14), the lookup's being zero in the rows of the
ids absent from "tokens" (0, 1, 3, 6, 7, 16; ids 8, 13 and 15 occur 3, 2
and 2 times). On CPU (an AMD EPYC machine) Flax's float32 run was within
1.3e-6 of "out_f64" (largest |out| 7.3), 2.4e-5 of "loss_f64" (101.4) and
1.4e-5 of "grads_f64" (at most 2.8e-7 of a leaf's largest gradient). The
script prints these figures as it runs.
"""

from fixture_out import enable_x64_in_f64_pass, grad_gaps, main_f64, normal, perturb, save, tree_gap

# The float64 reference pass (see `shared_f64`) runs in a process of its
# own: `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax.traverse_util import flatten_dict  # noqa: E402

from flax_keys import arr, by_path, from_arr  # noqa: E402

NAME = "flax_shared"
VOCAB, FEATURES = 20, 8
BATCH, LENGTH = 3, 6


class Tied(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(VOCAB, FEATURES)  # Embed_0
        x = embed(tokens)  # [b, 6, 8]
        dense = nn.Dense(8)  # Dense_0
        x = dense(nn.relu(dense(x)))  # one kernel, applied twice
        norm = nn.LayerNorm()  # LayerNorm_0
        x = norm(x) + norm(x * 2.0)
        head = nn.Dense(8, name="head")  # named, applied once
        x = head(x)
        return embed.attend(x)  # [b, 6, 20]: x @ embedding.T


# The fixture.


def shared(out):
    rng = np.random.default_rng(20261251)
    model = Tied()
    tokens = rng.integers(0, VOCAB, (BATCH, LENGTH)).astype(np.int32)
    w = normal(rng, (BATCH, LENGTH, VOCAB))
    xs = jnp.asarray(tokens)
    variables = perturb(model.init(jax.random.PRNGKey(51), xs), rng)
    assert sorted(variables["params"]) == ["Dense_0", "Embed_0", "LayerNorm_0", "head"]

    def loss_fn(params):
        y = model.apply({"params": params}, xs)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert y.shape == (BATCH, LENGTH, VOCAB) and y.dtype == jnp.float32
    ids, counts = np.unique(tokens, return_counts=True)
    print(f"{NAME}: tokens {tokens.tolist()}; ids repeated {ids[counts > 1].tolist()} "
          f"(counts {counts[counts > 1].tolist()}), absent {sorted(set(range(VOCAB)) - set(ids.tolist()))}")
    save(out, NAME, variables, {
        "tokens": arr(tokens),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": by_path(grads, "params"),
    })


def plain_forward(xp, params, e_lookup, e_attend, tokens):
    """Tied written out with numpy (xp = np) or jax.numpy (xp = jnp), not
    through Flax, with the embedding given twice: `e_lookup` for the
    lookup, `e_attend` for the attend. Returns (out, the input of attend)."""
    p = flatten_dict(params, sep="/")

    def dense(x, m):
        return x @ p[f"{m}/kernel"] + p[f"{m}/bias"]

    def norm(x):
        mu = x.mean(-1, keepdims=True)
        var = xp.maximum(0.0, (x * x).mean(-1, keepdims=True) - mu * mu)
        return (x - mu) / xp.sqrt(var + 1e-6) * p["LayerNorm_0/scale"] + p["LayerNorm_0/bias"]

    x = e_lookup[tokens]
    x = dense(xp.maximum(dense(x, "Dense_0"), 0.0), "Dense_0")
    x = norm(x) + norm(x * 2.0)
    h = dense(x, "head")
    return h @ e_attend.T, h


def shared_f64(fields, variables):
    """Adds to flax_shared.json's fields the same forward and gradient in
    float64, on the float32 checkpoint's values widened (`variables`):
    "out_f64", "loss_f64", "grads_f64"."""
    model = Tied()
    tokens = from_arr(fields["tokens"]).astype(np.int32)
    w = from_arr(fields["w"])
    xs = jnp.asarray(tokens)

    def loss_fn(params):
        y = model.apply({"params": params}, xs)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert y.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in jax.tree_util.tree_leaves(grads))
    fields["out_f64"] = arr(y)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = by_path(grads, "params")
    assert sorted(fields["grads_f64"]) == sorted(fields["grads"]) == fields["paths"]

    # The semantics the docstring states, checked outside Flax: the forward
    # in numpy, and the embedding's gradient as the sum of its two uses.
    params64 = jax.tree_util.tree_map(np.asarray, variables["params"])
    e = params64["Embed_0"]["embedding"]
    ref, _ = plain_forward(np, params64, e, e, tokens)
    forward_gap = float(np.max(np.abs(ref - np.asarray(y))))
    assert forward_gap < 1e-12, forward_gap

    def split_loss(e_lookup, e_attend):
        return jnp.sum(plain_forward(jnp, variables["params"], e_lookup, e_attend, xs)[0] * w)

    e64 = variables["params"]["Embed_0"]["embedding"]
    lookup_term, attend_term = (np.asarray(g) for g in jax.grad(split_loss, argnums=(0, 1))(e64, e64))
    g_embed = np.asarray(grads["Embed_0"]["embedding"])
    split_gap = float(np.max(np.abs(g_embed - (lookup_term + attend_term))))
    assert split_gap < 1e-12, split_gap
    absent = sorted(set(range(VOCAB)) - set(tokens.reshape(-1).tolist()))
    assert not np.any(lookup_term[absent]) and np.all(np.abs(attend_term).sum(1) > 0)
    def plain_loss(params):
        e = params["Embed_0"]["embedding"]
        return jnp.sum(plain_forward(jnp, params, e, e, xs)[0] * w)

    plain_gap = tree_gap(jax.grad(plain_loss)(variables["params"]), grads)
    assert plain_gap < 1e-12, plain_gap
    print(f"{NAME} float64: numpy forward within {forward_gap:.2e} of out_f64; jax.numpy "
          f"gradients within {plain_gap:.2e} of grads_f64; embedding gradient = lookup term + "
          f"attend term to {split_gap:.2e} (lookup term zero in the rows of absent ids {absent}; "
          f"largest |lookup term| {np.max(np.abs(lookup_term)):.2e}, |attend term| "
          f"{np.max(np.abs(attend_term)):.2e})")

    out32 = from_arr(fields["out"])
    gap, rel = grad_gaps(fields, each=True)
    print(f"{NAME} float64: max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e} "
          f"(largest |out_f64| {np.max(np.abs(np.asarray(y))):.2e}), "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e} (loss_f64 {float(loss):.6f}), "
          f"max |grads - grads_f64| {gap:.2e} ({rel:.2e} of a leaf's largest)")


if __name__ == "__main__":
    main_f64(__file__, shared, NAME, shared_f64)
