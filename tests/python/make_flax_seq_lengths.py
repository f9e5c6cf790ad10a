"""Writes the fixture of variable-length sequences through Flax's `nn.RNN`
(`seq_lengths`): a classifier over padded token sequences, with a forward
and a backward LSTM whose final carries feed a Dense head and a reversed,
order-kept GRU tagger, as a Flax checkpoint saved exactly as
`flax.serialization.to_bytes(variables)` returns it, with its outputs and
gradients in float32 and float64.

    /tmp/venv/bin/python tests/python/make_flax_seq_lengths.py [OUTDIR]

writes tests/fixtures/flax_seq_lengths.{msgpack,json}, or those files in
OUTDIR to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, numpy 2.4.6, msgpack 1.2.4 made the committed files
(Python 3.11; requirements.txt). The float64 results come from a second
run of the script in a process of its own (`fixture_out.main_f64`), since
`jax_enable_x64` is process-wide.

The model, `Classifier` (tokens [4, 7] int32, lengths [4] int32):

    x = nn.Embed(30, 8)(tokens)                                  # Embed_0
    (_, h_f), _ = nn.RNN(nn.LSTMCell(6), return_carry=True,
                         name="forward_rnn")(x, seq_lengths=lengths)
    (_, h_b), _ = nn.RNN(nn.LSTMCell(6), return_carry=True, reverse=True,
                         name="backward_rnn")(x, seq_lengths=lengths)
    ys = nn.RNN(nn.GRUCell(5), reverse=True, keep_order=True,
                name="tagger")(x, seq_lengths=lengths)           # [4, 7, 5]
    logits = nn.Dense(3)(jnp.concatenate([h_f, h_b], axis=-1))  # Dense_0
    return logits, ys                                            # [4, 3]

What Flax does with it (flax/linen/recurrent.py: `RNN.__call__`,
`flip_sequences`, `_select_last_carry`), T = 7 steps, a row of length L:

- Parameter paths. The cells are built inside `Classifier.__call__`, so
  they belong to Classifier, not to their RNN (as in flax_rnn.json and
  flax_encdec): `RNN` has no parameters and adds no level, the names
  "forward_rnn", "backward_rnn" and "tagger" appear nowhere in the
  checkpoint. The cells are numbered in the order they are built:
  `LSTMCell_0` is forward_rnn's, `LSTMCell_1` backward_rnn's, `GRUCell_0`
  the tagger's. An LSTMCell holds `{ii,if,ig,io}/kernel` (8, 6), no bias,
  and `{hi,hf,hg,ho}/{kernel (6, 6), bias (6)}`; a GRUCell holds
  `{ir,iz,in}/{kernel (8, 5), bias (5)}`, `{hr,hz}/kernel` (5, 5) and
  `hn/{kernel (5, 5), bias (5)}` (n = tanh(x W_in + b_in + r * (h W_hn +
  b_hn))). Kernels are (in, out).
- Padded steps are not skipped: the scan always runs the cell T times on
  every row, from the zero initial carry (`carry_init` zeros; the default
  `init_key` changes nothing), the carry of a padded step following on from
  the step before it. Nothing is masked or zeroed: the outputs at padded
  steps are the cell's outputs on the padding (here the embedding of id 0),
  and the tagger's "ys" holds them at every position t >= L.
- `reverse=True` with `seq_lengths` reverses each row within its length,
  and the padding block within itself (`flip_sequences`: the input of
  scan step s is position (T - 1 - s + L) mod T), so that padding stays at
  the end: scan steps 0 .. L-1 read positions L-1, ..., 0, then steps
  L .. T-1 read positions T-1, ..., L. A row of length 7 is plainly
  reversed; one of length 1 reads 0, 6, 5, 4, 3, 2, 1.
- The carry: with `return_carry=True` and `seq_lengths` given, the scan
  also outputs the carry of every step and `_select_last_carry` picks, in
  each row, the carry after scan step L-1 (`carries[L - 1, b]`), the state
  of the last valid element; the carries of the padded steps are computed
  and dropped. So h_f is the forward LSTM's h after positions 0 .. L-1,
  and h_b the backward LSTM's h after positions L-1, ..., 0 (its final
  reversed step reads position 0). Both are unaffected by the padding.
  (A length of 0 would index carries[-1], the carry after all T steps;
  lengths must be 1 .. T.)
  The LSTM carry is (c, h); h is taken.
- `keep_order=True` applies the same within-length flip to the outputs,
  which is its own inverse: ys[b, t] for t < L is the GRU state after
  positions L-1, ..., t (the padding never reaches it); for t >= L it is
  the state after positions L-1, ..., 0 and then T-1, ..., t, i.e. the
  cell run on over the padding from the row's last position back to t.
- Gradients: the LSTMs' padded steps do not reach the loss (their outputs
  are unused, their carries dropped), but "ys" at padded positions enters
  the loss, so GRUCell_0's gradient has terms from the padded steps and
  the embedding's row 0 (the padding id) gets a gradient through the
  tagger only.

Parameters are initialised from `PRNGKey(81)`, then perturbed by
`fixture_out.perturb` (`p + 0.1 * N(0, 1)`, so zero biases hide nothing)
from `np.random.default_rng(20261281)`, after "tokens", "w_logits" and
"w_ys" are drawn from that generator. Everything saved is float32.

In flax_seq_lengths.json (arrays are `{"shape": [...], "data": [flat
row-major]}`, `flax_keys.arr`):

- "tokens" [4, 7]: the token ids (integers stored as floats),
  `integers(1, 30, (4, 7))` at the valid positions (t < L) and 0 at the
  padded ones (t >= L); given to Flax as int32;
- "lengths" [4, 1]: the lengths 7, 3, 1, 5 (stored as floats; one full
  row, one of length 1); given to Flax as int32 [4];
- "logits" [4, 3]: the Dense head's output;
- "ys" [4, 7, 5]: the tagger's outputs at every position, the padded ones
  included (the cell's outputs on the padding, see above);
- "w_logits" [4, 3], "w_ys" [4, 7, 5]: fixed standard normal arrays;
  "loss" = sum(logits * w_logits) + sum(ys * w_ys);
- "grads": d loss / d params keyed "params/<path>"
  ("params/LSTMCell_0/ii/kernel"), in Flax's own layouts ((in, out)
  kernels, the (30, 8) embedding);
- "logits_f64", "ys_f64", "loss_f64", "grads_f64": the same in float64,
  on the float32 checkpoint's values widened (w_logits and w_ys widened
  likewise), for a float64 port to be held to at 1e-9 (the cells get
  `param_dtype=float64` there, `Classifier.cell_dtype`: it is also the
  dtype of their zero initial carry, and lax.scan rejects a float32 carry
  that a step returns as float64);
- "no_lengths_logits_f64" [4, 3]: the float64 logits with `seq_lengths`
  None (every row run over all 7 steps, padding included, plain flip for
  the backward LSTM): row 0 (length 7) equals "logits_f64", the other
  rows differ, which shows the lengths matter;
- "paths": the sorted "/" paths of every leaf of the msgpack;
  "num_params": 1214 (embedding 240, LSTMCell_0 and LSTMCell_1 360 each,
  GRUCell_0 215, Dense_0 39).

The float64 pass also checks the description above outside Flax: a plain
numpy float64 reimplementation of the three RNNs (each row's scan order
written out as above, the carry taken after step L-1, the outputs put back
at the positions they read; LSTMCell_0 as the forward one) matches
"logits_f64" and "ys_f64" (1.7e-16 here) and, with every length 7,
"no_lengths_logits_f64" (1.1e-16; it differs from "logits_f64" by 0,
0.31, 0.20, 0.096 in the rows of lengths 7, 3, 1, 5); the same written in
jax.numpy, differentiated, matches "grads_f64" (2.2e-15); Flax's logits
and its ys at valid positions do not change (exactly) when the padded ids
are replaced by others, while its ys at padded positions do; and the
embedding's row 0 gets an exactly zero gradient through the logits (its
whole gradient, up to 4.7, comes through the tagger's padded outputs). On
CPU (an AMD EPYC machine) Flax's float32 run was within 4.1e-8 of
"logits_f64" (largest |logits| 0.42), 5.5e-8 of "ys_f64", 9.7e-8 of
"loss_f64" (1.661854) and 7.6e-7 of "grads_f64" (at most 4.5e-7 of a
leaf's largest gradient). The script prints these figures as it runs.
"""

from typing import Any

from fixture_out import enable_x64_in_f64_pass, grad_gaps, main_f64, normal, perturb, save, tree_gap

# The float64 reference pass (see `seq_lengths_f64`) runs in a process of
# its own: `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax.traverse_util import flatten_dict  # noqa: E402

from flax_keys import arr, by_path, from_arr  # noqa: E402

NAME = "flax_seq_lengths"
VOCAB, FEATURES, LSTM, GRU, CLASSES = 30, 8, 6, 5, 3
BATCH, LENGTH = 4, 7
LENGTHS = [7, 3, 1, 5]


class Classifier(nn.Module):
    # The cells' param_dtype, which is also the dtype of their zero initial
    # carry: the float64 pass sets it to float64, since a float32 carry
    # would not match the float64 carry a step returns (lax.scan rejects
    # that). It makes no parameter and no other difference.
    cell_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens, lengths):  # tokens [B, 7] int32, lengths [B] int32 (or None)
        x = nn.Embed(VOCAB, FEATURES)(tokens)  # Embed_0
        (_, h_f), _ = nn.RNN(
            nn.LSTMCell(LSTM, param_dtype=self.cell_dtype), return_carry=True, name="forward_rnn"
        )(x, seq_lengths=lengths)  # cell LSTMCell_0
        (_, h_b), _ = nn.RNN(
            nn.LSTMCell(LSTM, param_dtype=self.cell_dtype), return_carry=True, reverse=True, name="backward_rnn"
        )(x, seq_lengths=lengths)  # cell LSTMCell_1
        ys = nn.RNN(
            nn.GRUCell(GRU, param_dtype=self.cell_dtype), reverse=True, keep_order=True, name="tagger"
        )(x, seq_lengths=lengths)  # cell GRUCell_0; [B, 7, 5]
        logits = nn.Dense(CLASSES)(jnp.concatenate([h_f, h_b], axis=-1))  # Dense_0
        return logits, ys


# The fixture.


def seq_lengths(out):
    rng = np.random.default_rng(20261281)
    model = Classifier()
    lengths = np.asarray(LENGTHS, np.int32)
    valid = np.arange(LENGTH)[None, :] < lengths[:, None]  # [4, 7]
    tokens = np.where(valid, rng.integers(1, VOCAB, (BATCH, LENGTH)), 0).astype(np.int32)
    w_logits = normal(rng, (BATCH, CLASSES))
    w_ys = normal(rng, (BATCH, LENGTH, GRU))
    xs, ls = jnp.asarray(tokens), jnp.asarray(lengths)
    variables = perturb(model.init(jax.random.PRNGKey(81), xs, ls), rng)
    assert sorted(variables["params"]) == ["Dense_0", "Embed_0", "GRUCell_0", "LSTMCell_0", "LSTMCell_1"]

    def loss_fn(params):
        logits, ys = model.apply({"params": params}, xs, ls)
        return jnp.sum(logits * w_logits) + jnp.sum(ys * w_ys), (logits, ys)

    (loss, (logits, ys)), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert logits.shape == (BATCH, CLASSES) and logits.dtype == jnp.float32
    assert ys.shape == (BATCH, LENGTH, GRU) and ys.dtype == jnp.float32
    print(f"{NAME}: lengths {LENGTHS}; tokens {tokens.tolist()}")
    save(out, NAME, variables, {
        "tokens": arr(tokens),
        "lengths": arr(lengths.reshape(BATCH, 1)),
        "logits": arr(logits),
        "ys": arr(ys),
        "w_logits": arr(w_logits),
        "w_ys": arr(w_ys),
        "loss": float(loss),
        "grads": by_path(grads, "params"),
    })


def scan_order(length, reverse):
    """The position each scan step of a row of `length` reads: 0 .. T-1
    forward; reversed, L-1 .. 0 then T-1 .. L (padding kept at the end,
    reversed within itself)."""
    if not reverse:
        return list(range(LENGTH))
    return list(range(length - 1, -1, -1)) + list(range(LENGTH - 1, length - 1, -1))


def plain_forward(xp, params, tokens, lengths):
    """Classifier written out with numpy (xp = np) or jax.numpy (xp =
    jnp), row by row and step by step, not through Flax. Returns (logits,
    ys)."""
    p = flatten_dict(params, sep="/")

    def sigmoid(v):
        return 1.0 / (1.0 + xp.exp(-v))

    def lstm(cell):
        def step(carry, x):
            c, h = carry

            def pre(g):
                return x @ p[f"{cell}/i{g}/kernel"] + h @ p[f"{cell}/h{g}/kernel"] + p[f"{cell}/h{g}/bias"]

            i, f, g, o = sigmoid(pre("i")), sigmoid(pre("f")), xp.tanh(pre("g")), sigmoid(pre("o"))
            c = f * c + i * g
            h = o * xp.tanh(c)
            return (c, h), h

        return step, (xp.zeros(LSTM), xp.zeros(LSTM))

    def gru(cell):
        def step(h, x):
            def dense(name, v, bias):
                y = v @ p[f"{cell}/{name}/kernel"]
                return y + p[f"{cell}/{name}/bias"] if bias else y

            r = sigmoid(dense("ir", x, True) + dense("hr", h, False))
            z = sigmoid(dense("iz", x, True) + dense("hz", h, False))
            n = xp.tanh(dense("in", x, True) + r * dense("hn", h, True))
            h = (1.0 - z) * n + z * h
            return h, h

        return step, xp.zeros(GRU)

    def run(cell, x_row, length, reverse):
        """(the carry after step L-1, [the output of each position])."""
        step, carry = cell
        order = scan_order(length, reverse)
        carries, outs = [], [None] * LENGTH
        for t in order:
            carry, y = step(carry, x_row[t])
            carries.append(carry)
            outs[t] = y  # keep_order: each output back at the position it read
        return carries[length - 1], outs

    logits, ys = [], []
    for b in range(BATCH):
        x_row = p["Embed_0/embedding"][tokens[b]]  # [7, 8]
        (_, h_f), _ = run(lstm("LSTMCell_0"), x_row, lengths[b], False)
        (_, h_b), _ = run(lstm("LSTMCell_1"), x_row, lengths[b], True)
        _, outs = run(gru("GRUCell_0"), x_row, lengths[b], True)
        logits.append(xp.concatenate([h_f, h_b]) @ p["Dense_0/kernel"] + p["Dense_0/bias"])
        ys.append(xp.stack(outs))
    return xp.stack(logits), xp.stack(ys)


def seq_lengths_f64(fields, variables):
    """Adds to flax_seq_lengths.json's fields the same outputs and
    gradients in float64, on the float32 checkpoint's values widened
    (`variables`): "logits_f64", "ys_f64", "loss_f64", "grads_f64", and
    "no_lengths_logits_f64"."""
    model = Classifier(cell_dtype=jnp.float64)
    tokens = from_arr(fields["tokens"]).astype(np.int32)
    lengths = from_arr(fields["lengths"]).reshape(-1).astype(np.int32)
    assert lengths.tolist() == LENGTHS
    w_logits, w_ys = from_arr(fields["w_logits"]), from_arr(fields["w_ys"])
    xs, ls = jnp.asarray(tokens), jnp.asarray(lengths)

    def loss_fn(params):
        logits, ys = model.apply({"params": params}, xs, ls)
        return jnp.sum(logits * w_logits) + jnp.sum(ys * w_ys), (logits, ys)

    (loss, (logits, ys)), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert logits.dtype == ys.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in jax.tree_util.tree_leaves(grads))
    no_lengths, _ = model.apply(variables, xs, None)
    assert no_lengths.dtype == jnp.float64
    fields["logits_f64"] = arr(logits)
    fields["ys_f64"] = arr(ys)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = by_path(grads, "params")
    fields["no_lengths_logits_f64"] = arr(no_lengths)
    assert sorted(fields["grads_f64"]) == sorted(fields["grads"]) == fields["paths"]

    # The semantics the docstring states, checked outside Flax: the three
    # RNNs in numpy (with the lengths, and with every length 7 for
    # seq_lengths None), and their gradients in jax.numpy.
    params64 = jax.tree_util.tree_map(np.asarray, variables["params"])
    ref_logits, ref_ys = plain_forward(np, params64, tokens, lengths.tolist())
    forward_gap = max(float(np.max(np.abs(ref_logits - np.asarray(logits)))),
                      float(np.max(np.abs(ref_ys - np.asarray(ys)))))
    assert forward_gap < 1e-12, forward_gap
    ref_none, _ = plain_forward(np, params64, tokens, [LENGTH] * BATCH)
    none_gap = float(np.max(np.abs(ref_none - np.asarray(no_lengths))))
    assert none_gap < 1e-12, none_gap
    row_diff = np.max(np.abs(np.asarray(no_lengths) - np.asarray(logits)), axis=1)
    assert row_diff[0] < 1e-12 and np.all(row_diff[1:] > 1e-3), row_diff

    def plain_loss(params):
        lg, y = plain_forward(jnp, params, tokens, lengths.tolist())
        return jnp.sum(lg * w_logits) + jnp.sum(y * w_ys)

    plain_gap = tree_gap(jax.grad(plain_loss)(variables["params"]), grads)
    assert plain_gap < 1e-12, plain_gap

    # The padding is ignored by the logits and by ys at valid positions,
    # not by ys at padded ones.
    valid = np.arange(LENGTH)[None, :] < lengths[:, None]
    other = np.where(valid, tokens, (np.arange(LENGTH)[None, :] * 3 + np.arange(BATCH)[:, None]) % (VOCAB - 1) + 1)
    logits_t, ys_t = (np.asarray(a) for a in model.apply(variables, xs, ls))
    logits_o, ys_o = (np.asarray(a) for a in model.apply(variables, jnp.asarray(other.astype(np.int32)), ls))
    assert np.array_equal(logits_o, logits_t)
    assert np.array_equal(ys_o[valid], ys_t[valid])
    assert np.all(np.max(np.abs(ys_o - ys_t), axis=-1)[~valid] > 1e-6)
    # Id 0 occurs at padded positions only: its embedding row gets a
    # gradient through the tagger's padded outputs, none through the logits.
    assert not np.any(tokens[valid] == 0) and np.all(tokens[~valid] == 0)
    g_pad = np.asarray(grads["Embed_0"]["embedding"])[0]
    g_logits = jax.grad(lambda q: jnp.sum(model.apply({"params": q}, xs, ls)[0] * w_logits))(variables["params"])
    assert not np.any(np.asarray(g_logits["Embed_0"]["embedding"])[0]) and np.any(g_pad)
    print(f"{NAME} float64: numpy RNNs within {forward_gap:.2e} of logits_f64 / ys_f64 and "
          f"{none_gap:.2e} of no_lengths_logits_f64 (which differs from logits_f64 by "
          f"{', '.join(f'{d:.2e}' for d in row_diff)} in rows of lengths {LENGTHS}); jax.numpy "
          f"gradients within {plain_gap:.2e} of grads_f64; other padded ids: logits and valid ys "
          f"unchanged exactly, padded ys changed; embedding row 0 (padding): gradient through "
          f"the logits exactly 0, largest |grads_f64| {np.max(np.abs(g_pad)):.2e}")

    gap, rel = grad_gaps(fields, each=True)
    print(f"{NAME} float64: max |logits - logits_f64| "
          f"{np.max(np.abs(from_arr(fields['logits']) - np.asarray(logits))):.2e} "
          f"(largest |logits_f64| {np.max(np.abs(np.asarray(logits))):.2e}), max |ys - ys_f64| "
          f"{np.max(np.abs(from_arr(fields['ys']) - np.asarray(ys))):.2e}, "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e} (loss {fields['loss']:.6f}, "
          f"loss_f64 {float(loss):.6f}), max |grads - grads_f64| {gap:.2e} ({rel:.2e} of a leaf's largest)")


if __name__ == "__main__":
    main_f64(__file__, seq_lengths, NAME, seq_lengths_f64)
