"""Writes the fixture of tests/compact_shared.rs: Flax's semantics of a
layer bound once and applied several times, and of `Embed.attend` (tied
input and output embeddings), as a Flax checkpoint saved exactly as
`flax.serialization.to_bytes(variables)` returns it, with its output and
gradients in float32 and float64.

    /tmp/venv/bin/python tests/python/make_flax_shared.py [OUTDIR]

writes tests/fixtures/flax_shared.{msgpack,json}, or those files in OUTDIR
to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, numpy 2.4.6, msgpack 1.2.4 made the committed files
(Python 3.11; requirements.txt). The script runs itself a second time with
`--f64-reference` (as make_flax_ports.py does): that process sets
`JAX_ENABLE_X64` before jax is imported, since `jax_enable_x64` is
process-wide.

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

Parameters are initialised from `PRNGKey(51)`, then perturbed `p + 0.1 *
N(0, 1)` from `np.random.default_rng(20261251)`, leaf by leaf in the
sorted order of the flattened paths, after "tokens" and "w" are drawn
from that generator (so zero biases and unit LayerNorm scales hide
nothing). Everything saved is float32.

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

import json
import os
import pathlib
import subprocess
import sys

# The float64 reference pass (see `shared_f64`) runs in a process of its
# own: `jax_enable_x64` must be set before jax is imported.
F64 = "--f64-reference"
if F64 in sys.argv:
    os.environ["JAX_ENABLE_X64"] = "1"

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from flax_keys import arr

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
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


# Fixture helpers (as in make_flax_structured.py and make_flax_lm1b.py).


def normal(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def perturb(variables, rng):
    """params + 0.1 N(0, 1), leaf by leaf in sorted path order."""
    assert set(variables) == {"params"}
    flat = flatten_dict(variables["params"])
    new = {}
    for path in sorted(flat):
        p = np.asarray(flat[path], np.float32)
        new[path] = jnp.asarray(p + 0.1 * normal(rng, p.shape), jnp.float32)
    return {"params": unflatten_dict(new)}


def by_path(tree, collection):
    """{"collection/.../leaf": arr} of a tree of that collection."""
    return {f"{collection}/{k}": arr(v) for k, v in sorted(flatten_dict(tree, sep="/").items())}


def write_json(path, fields):
    with open(path, "w") as f:
        json.dump(fields, f, separators=(",", ":"))
        f.write("\n")


def save(out, name, variables, fields):
    """Writes NAME.msgpack (to_bytes of the variables) and NAME.json (the
    fields plus the saved leaves' paths and the number of parameters),
    after checking that the msgpack reads back to the same leaves."""
    blob = flax.serialization.to_bytes(variables)
    saved = flatten_dict(flax.serialization.msgpack_restore(blob), sep="/")
    mine = flatten_dict(variables, sep="/")
    assert sorted(saved) == sorted(mine), name
    for path, value in saved.items():
        assert value.dtype == np.float32, path
        assert np.all(np.isfinite(value)), path
        assert np.array_equal(value, np.asarray(mine[path])), path
    num_params = int(sum(v.size for k, v in saved.items() if k.startswith("params/")))
    fields = dict(fields, paths=sorted(saved), num_params=num_params)
    (out / f"{name}.msgpack").write_bytes(blob)
    write_json(out / f"{name}.json", fields)
    sizes = {ext: (out / f"{name}.{ext}").stat().st_size for ext in ("msgpack", "json")}
    print(f"wrote {out / name}.msgpack ({sizes['msgpack']} bytes) and .json ({sizes['json']} bytes): "
          f"{num_params} parameters")
    for path in fields["paths"]:
        print(f"  {path} {saved[path].shape}")


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


def shared_f64(out):
    """Adds to flax_shared.json the same forward and gradient in float64,
    on the float32 checkpoint's values widened: "out_f64", "loss_f64",
    "grads_f64"."""
    model = Tied()
    path = out / f"{NAME}.json"
    fields = json.loads(path.read_text())
    blob = (out / f"{NAME}.msgpack").read_bytes()

    def array(a):
        return np.asarray(a["data"], np.float64).reshape(a["shape"])

    tokens = array(fields["tokens"]).astype(np.int32)
    w = array(fields["w"])
    variables = jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, jnp.float64), flax.serialization.msgpack_restore(blob)
    )
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

    plain_grads = flatten_dict(jax.grad(plain_loss)(variables["params"]), sep="/")
    plain_gap = max(
        float(np.max(np.abs(np.asarray(plain_grads[k]) - np.asarray(v))))
        for k, v in flatten_dict(grads, sep="/").items()
    )
    assert plain_gap < 1e-12, plain_gap
    print(f"{NAME} float64: numpy forward within {forward_gap:.2e} of out_f64; jax.numpy "
          f"gradients within {plain_gap:.2e} of grads_f64; embedding gradient = lookup term + "
          f"attend term to {split_gap:.2e} (lookup term zero in the rows of absent ids {absent}; "
          f"largest |lookup term| {np.max(np.abs(lookup_term)):.2e}, |attend term| "
          f"{np.max(np.abs(attend_term)):.2e})")

    out32 = array(fields["out"])
    gap, rel = 0.0, 0.0
    for k, v in fields["grads_f64"].items():
        g64 = array(v)
        d = float(np.max(np.abs(array(fields["grads"][k]) - g64)))
        gap = max(gap, d)
        rel = max(rel, d / max(float(np.max(np.abs(g64))), 1e-30))
        print(f"  {k}: max |grad - grad_f64| {d:.2e} (largest |grad_f64| {np.max(np.abs(g64)):.2e})")
    print(f"{NAME} float64: max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e} "
          f"(largest |out_f64| {np.max(np.abs(np.asarray(y))):.2e}), "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e} (loss_f64 {float(loss):.6f}), "
          f"max |grads - grads_f64| {gap:.2e} ({rel:.2e} of a leaf's largest)")
    write_json(path, fields)
    print(f"  {path}: {path.stat().st_size} bytes")


def main():
    args = [a for a in sys.argv[1:] if a != F64]
    out = pathlib.Path(args[0]) if args else FIXTURES
    out.mkdir(parents=True, exist_ok=True)
    if F64 in sys.argv:
        shared_f64(out)
        return
    shared(out)
    subprocess.run([sys.executable, __file__, F64, str(out)], check=True)


if __name__ == "__main__":
    main()
