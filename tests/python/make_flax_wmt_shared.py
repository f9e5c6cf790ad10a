"""Writes the fixture of the wmt Transformer port with shared embeddings:
the `Transformer` of google/flax examples/wmt/models.py as
make_flax_wmt.py has it, under wmt's own setting (configs/default.py):
one embedding table for the source, the targets and the logits. A Flax
checkpoint saved exactly as `flax.serialization.to_bytes(variables)`
returns it, with its logits and gradients in float32 and float64, and the
loss curves of make_flax_wmt.py's copy task.

    /tmp/venv/bin/python tests/python/make_flax_wmt_shared.py [OUTDIR]

writes tests/fixtures/flax_port_wmt_shared.{msgpack,json}, or those files
in OUTDIR to compare a fresh run with the committed ones. jax 0.10.2,
jaxlib 0.10.2, flax 0.12.8, optax 0.2.8, numpy 2.4.6, msgpack 1.2.4 made
the committed files (Python 3.11; requirements.txt). The float64 results
come from a second run of the script in a process of its own
(`fixture_out.main_f64`, `--f64-reference`), since `jax_enable_x64` is
process-wide: the script calls `enable_x64_in_f64_pass` before it
imports jax or make_flax_wmt.py (which imports jax). The JSON has exactly
flax_port_wmt.json's keys, with their meanings; make_flax_wmt.py's
docstring describes everything not stated here.

Shared with make_flax_wmt.py, imported from it: `TransformerConfig`,
`shift_right`, `sinusoidal_init`, `AddPositionEmbs`, `MlpBlock`,
`Encoder1DBlock`, `EncoderDecoder1DBlock`, `Encoder`, the masks
(`encoder_mask_of`, `decoder_masks_of`), `Transformer`'s `encode`,
`decode` and `__call__`; the sizes, the test tokens, "w" and their seed
(`default_rng(20261234)`, `test_tokens`), the init key `PRNGKey(33)` and
`fixture_out.perturb`; the training task, its data, loss, optimiser, steps
and seeds (`train_data`, `wmt_loss`, `train_curves`).

What differs:

- The configuration is `CONFIG.replace(share_embeddings=True,
  logits_via_embedding=True)`, as in wmt's configs/default.py; everything
  else as in make_flax_wmt.py (vocab_size = output_vocab_size = 23,
  emb_dim 16, ...).
- `Transformer.setup` (retyped below, the source's) builds
  `shared_embedding` = Embed(23, 16, embedding_init normal(1.0)), its
  parameter `params/shared_embedding/embedding` (23, 16) at the top level
  (it is an attribute of the Transformer), and passes it to `encoder` and
  `decoder`: the Encoder looks the source ids up in it, the Decoder the
  shifted targets, and neither builds an `Embed_0`.
- The Decoder's logits are `shared_embedding.attend(y) / sqrt(16)`, y the
  `encoderdecoder_norm` output [batch, 8, 16]: logits = y @ E^T / 4, E the
  shared (23, 16) table, no bias. No `logitdense`.
- `Decoder` is retyped here as a subclass of make_flax_wmt.py's, its
  `__call__` the source's less one cast: the source takes the logits from
  `output_embed.attend(y.astype(jnp.float32))`; here `attend(y)`, as
  make_flax_wmt.py drops every other `dtype` cast, so that the float64 run
  stays float64 to the logits. In float32 the cast does nothing: the
  script checks that make_flax_wmt.py's own `Transformer` (with the cast)
  gives the same logits and gradients bit for bit. In the float64 run the
  cast would round y to float32 and move "out_f64" by up to 7.9e-8
  (printed).
- Parameters: 10128 (make_flax_wmt.py's 10887, less its two `Embed_0`
  (368 each) and `logitdense` (391), plus `shared_embedding` (368)): the
  encoder holds 3824, the decoder 5936, `shared_embedding` 368. The paths
  are make_flax_wmt.py's, less `params/encoder/Embed_0/embedding`,
  `params/decoder/Embed_0/embedding` and `params/decoder/logitdense/
  {kernel,bias}`, plus `params/shared_embedding/embedding`.
- The gradient of `shared_embedding/embedding` sums its three uses: the
  encoder's lookup (scatter-add into the rows of the source ids), the
  decoder's lookup (the rows of the shifted targets, row 0 at least once a
  sequence) and the logits (row v gets the sum over batch and positions
  of d loss / d logits[..., v] times y / 4, in every row, looked up or
  not).
- The perturbation: `perturb` walks the sorted leaf paths, a different
  list here (no `Embed_0`, no `logitdense`, `shared_embedding` last), so
  the perturbed checkpoint shares no leaf with flax_port_wmt.msgpack
  although Flax's init gives the common leaves the same values.
- The training task: same data, procedure and seeds; each run starts
  from Flax's init of this model from `PRNGKey(s)`. The training loss's
  gradient on the padding id's row 0 of the table is no longer 0 (it was
  on make_flax_wmt.py's encoder `Embed_0`): the softmax of every target
  position runs over all 23 ids, 0 included, and the decoder looks 0 up
  first.

The figures measured here (printed as the script runs; CPU, an AMD EPYC
machine): "loss" -30.526842 in float32, "loss_f64" -30.526867651; Flax's
float32 run is within 6.4e-7 of "out_f64", 5.1e-7 of "encoded_f64",
2.6e-5 of "loss_f64" (8.4e-7 of it) and 4.6e-6 of "grads_f64" (at most
7.8e-7 of a leaf's largest gradient). Training: mean loss 3.6457 at step
0 (std 0.1209), 2.8886 at step 10 (std 0.0522), 2.5921 at step 20 (std
0.0518) and 1.9395 at step 40 (std 0.0890; the five final losses 1.7902
.. 2.0703), final accuracies 0.38 .. 0.53: the task is being learnt, more
slowly than make_flax_wmt.py's (1.4903 at step 40), and the curve is
still falling at step 40 (by about 0.035 a step).
"""

from fixture_out import enable_x64_in_f64_pass, grad_gaps, main_f64, normal, perturb, save

# The float64 reference pass (see `wmt_shared_f64`) runs in a process of
# its own: `jax_enable_x64` must be set before jax is imported, and
# importing make_flax_wmt imports jax.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import make_flax_wmt as wmt  # noqa: E402  (its main is guarded: importing it writes nothing)
from flax_keys import arr, by_path, from_arr, leaves  # noqa: E402
from make_flax_wmt import (  # noqa: E402
    AddPositionEmbs,
    EncoderDecoder1DBlock,
    Encoder,
    decoder_masks_of,
    encoder_mask_of,
    shift_right,
    sinusoidal_init,
    test_tokens,
    train_curves,
    train_data,
)

NAME = "flax_port_wmt_shared"

CONFIG = wmt.CONFIG.replace(share_embeddings=True, logits_via_embedding=True)


# google/flax examples/wmt/models.py, the pieces make_flax_wmt.py's
# versions cannot give: the Decoder without the float32 cast before
# `attend`, and a Transformer whose setup builds that Decoder.


class Decoder(wmt.Decoder):
    """Transformer Model Decoder for sequence to sequence translation."""

    @nn.compact
    def __call__(
        self,
        encoded,
        targets,
        targets_positions=None,
        decoder_mask=None,
        encoder_decoder_mask=None,
    ):
        config = self.config

        assert encoded.ndim == 3  # (batch, len, depth)
        assert targets.ndim == 2  # (batch, len)

        # Target Embedding
        if self.shared_embedding is None:
            output_embed = nn.Embed(
                num_embeddings=config.output_vocab_size,
                features=config.emb_dim,
                embedding_init=nn.initializers.normal(stddev=1.0),
            )
        else:
            output_embed = self.shared_embedding

        y = targets.astype("int32")
        if not config.decode:
            y = shift_right(y)
        y = output_embed(y)
        y = AddPositionEmbs(config=config, decode=config.decode, name="posembed_output")(
            y, inputs_positions=targets_positions
        )
        y = nn.Dropout(rate=config.dropout_rate)(y, deterministic=config.deterministic)

        # Target-Input Decoder
        for lyr in range(config.num_layers):
            y = EncoderDecoder1DBlock(config=config, name=f"encoderdecoderblock_{lyr}")(
                y,
                encoded,
                decoder_mask=decoder_mask,
                encoder_decoder_mask=encoder_decoder_mask,
            )
        y = nn.LayerNorm(name="encoderdecoder_norm")(y)

        # Decoded Logits
        if config.logits_via_embedding:
            # Use the transpose of embedding matrix for logit transform.
            # (The source's y.astype(jnp.float32) dropped: see the docstring.)
            logits = output_embed.attend(y)
            # Correctly normalize pre-softmax logits for this shared case.
            logits = logits / jnp.sqrt(y.shape[-1])
        else:
            logits = nn.Dense(
                config.output_vocab_size,
                kernel_init=config.kernel_init,
                bias_init=config.bias_init,
                name="logitdense",
            )(y)
        return logits


class Transformer(wmt.Transformer):
    """Transformer Model for sequence to sequence translation (`encode`,
    `decode`, `__call__` make_flax_wmt.py's)."""

    def setup(self):
        config = self.config

        if config.share_embeddings:
            if config.output_vocab_size is not None:
                assert config.output_vocab_size == config.vocab_size, (
                    "can't share embedding with different vocab sizes."
                )
            self.shared_embedding = nn.Embed(
                num_embeddings=config.vocab_size,
                features=config.emb_dim,
                embedding_init=nn.initializers.normal(stddev=1.0),
            )
        else:
            self.shared_embedding = None

        self.encoder = Encoder(config=config, shared_embedding=self.shared_embedding)
        self.decoder = Decoder(config=config, shared_embedding=self.shared_embedding)


def make_model():
    return Transformer(config=CONFIG)


def source_model():
    """make_flax_wmt.py's own Transformer under this config: the source's
    cast before `attend` included."""
    return wmt.Transformer(config=CONFIG)


def value_and_grad(model, variables, xs, ys, w):
    def loss_fn(params):
        y = model.apply({"params": params}, xs, ys)
        return jnp.sum(y * w), y

    return jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])


def check_paths(paths):
    """The parameter paths make_flax_wmt.py's docstring lists, less the two
    `Embed_0` and `logitdense`, plus `shared_embedding`."""
    assert "params/shared_embedding/embedding" in paths
    assert not any("Embed_0" in p or "logitdense" in p for p in paths), paths
    assert all(p.startswith(("params/encoder/", "params/decoder/")) for p in paths
               if p != "params/shared_embedding/embedding"), paths


def wmt_shared(out):
    rng = np.random.default_rng(20261234)
    model = make_model()
    inputs = test_tokens(rng, wmt.IN_LEN, wmt.INPUT_LENGTHS)
    targets = test_tokens(rng, wmt.OUT_LEN, wmt.TARGET_LENGTHS)
    w = normal(rng, (wmt.BATCH, wmt.OUT_LEN, CONFIG.output_vocab_size))
    xs, ys = jnp.asarray(inputs), jnp.asarray(targets)
    variables = perturb(model.init(jax.random.PRNGKey(33), xs, ys), rng)
    shapes = {k: v.shape for k, v in leaves(variables).items()}
    check_paths(shapes)
    assert shapes["params/shared_embedding/embedding"] == (23, 16)

    (loss, y), grads = value_and_grad(model, variables, xs, ys, w)
    assert y.shape == (wmt.BATCH, wmt.OUT_LEN, 23) and y.dtype == jnp.float32
    (loss_src, y_src), grads_src = value_and_grad(source_model(), variables, xs, ys, w)
    assert np.array_equal(np.asarray(y), np.asarray(y_src)) and float(loss) == float(loss_src)
    gs, gs_src = leaves(grads), leaves(grads_src)
    assert sorted(gs) == sorted(gs_src)
    assert all(np.array_equal(np.asarray(gs[k]), np.asarray(gs_src[k])) for k in gs)
    encoded = model.apply(variables, xs, method=Transformer.encode)
    assert encoded.shape == (wmt.BATCH, wmt.IN_LEN, CONFIG.emb_dim)
    decoder_mask, encoder_decoder_mask = decoder_masks_of(xs, ys)
    table = sinusoidal_init(max_len=CONFIG.max_len)(None, (1, CONFIG.max_len, CONFIG.emb_dim))
    print(f"{NAME}: input lengths {wmt.INPUT_LENGTHS}, target lengths {wmt.TARGET_LENGTHS}, "
          f"loss {float(loss):.6f}; the float32 logits and gradients equal make_flax_wmt.py's "
          f"Transformer's (with the source's cast) bit for bit")
    ti, tt = train_data()
    save(out, NAME, variables, {
        "inputs": arr(inputs),
        "targets": arr(targets),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": by_path(grads, "params"),
        "encoded": arr(encoded),
        "encoder_mask": arr(encoder_mask_of(xs)),
        "decoder_mask": arr(decoder_mask),
        "encoder_decoder_mask": arr(encoder_decoder_mask),
        "pos_embedding": arr(table),
        "train": train_curves(model, ti, tt),
    })


def wmt_shared_f64(fields, variables):
    """Adds to flax_port_wmt_shared.json's fields the same forward and
    gradient in float64, on the float32 checkpoint's values widened
    (`variables`): "out_f64", "loss_f64", "grads_f64", "encoded_f64"."""
    model = make_model()
    xs = jnp.asarray(from_arr(fields["inputs"]).astype(np.int32))
    ys = jnp.asarray(from_arr(fields["targets"]).astype(np.int32))
    w = from_arr(fields["w"])

    (loss, y), grads = value_and_grad(model, variables, xs, ys, w)
    encoded = model.apply(variables, xs, method=Transformer.encode)
    assert y.dtype == jnp.float64 and encoded.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in leaves(grads).values())
    fields["out_f64"] = arr(y)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = by_path(grads, "params")
    fields["encoded_f64"] = arr(encoded)
    assert sorted(fields["grads_f64"]) == sorted(fields["grads"]) == fields["paths"]
    check_paths(fields["paths"])
    y_cast = source_model().apply(variables, xs, ys)
    assert y_cast.dtype == jnp.float64
    out32 = from_arr(fields["out"])
    gap, rel = grad_gaps(fields)
    print(f"{NAME} float64: loss_f64 {float(loss):.12f}, "
          f"max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e}, "
          f"max |encoded - encoded_f64| {np.max(np.abs(from_arr(fields['encoded']) - np.asarray(encoded))):.2e}, "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e}, max |grads - grads_f64| {gap:.2e} "
          f"({rel:.2e} of a leaf's largest); the source's float32 cast before attend would move "
          f"out_f64 by {np.max(np.abs(np.asarray(y_cast) - np.asarray(y))):.2e}")


if __name__ == "__main__":
    main_f64(__file__, wmt_shared, NAME, wmt_shared_f64)
