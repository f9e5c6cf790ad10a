"""Writes the fixture of an encoder-decoder Transformer port: a Flax
checkpoint of the `Transformer` of google/flax examples/wmt/models.py
(linen), saved exactly as `flax.serialization.to_bytes(variables)` returns
it, with its logits and gradients in float32 and float64, and the loss
curves of a small copy task both sides can run from the data stored here.

    /tmp/venv/bin/python tests/python/make_flax_wmt.py [OUTDIR]

writes tests/fixtures/flax_port_wmt.{msgpack,json}, or those files in
OUTDIR to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, optax 0.2.8, numpy 2.4.6, msgpack 1.2.4 made the
committed files (Python 3.11; requirements.txt). The float64 results come
from a second run of the script in a process of its own
(`fixture_out.main_f64`), since `jax_enable_x64` is process-wide.

The model is retyped here from examples/wmt/models.py (read at commit
047b288cfc0488d17df9152ae0f48bc7d715f933): `TransformerConfig`,
`shift_right`, `sinusoidal_init`, `AddPositionEmbs`, `MlpBlock`,
`Encoder1DBlock`, `EncoderDecoder1DBlock`, `Encoder`, `Decoder`,
`Transformer` (with `setup`, `encode`, `decode`, `__call__`), with the
same attributes, defaults, initialisers, submodule names and call order.
Unlike lm1b's, this source wraps no initialiser in
`nn.with_logical_partitioning`, so nothing is boxed: the msgpack's leaves
are plain arrays, their paths without a final "/value". Dropped: the
autoregressive decode path (`decode` is False throughout: no `cache`
collection, no `cache_index`, the attention's `decode=False`; `decode`
stays an attribute, and True raises), the packed-sequence inputs
(`inputs_positions`, `targets_positions`, `inputs_segmentation`,
`targets_segmentation` are kept but never given), and `dtype` (float32
throughout: the source passes `config.dtype` to every Dense, LayerNorm,
the attentions and the masks, and casts the embedded sequences and the
logits to it; the masks here are `make_attention_mask`'s and
`make_causal_mask`'s default float32, and nothing is cast, so the float64
run below stays float64 to the logits). `use_fp8` is kept, False as by
default, with the source's `dot_general_cls=nn.Fp8DenseGeneralOp if
config.use_fp8 else None` on MlpBlock's Dense layers: None here, Dense's
default (flax 0.12.8 has no `nn.Fp8DenseGeneralOp`, so True would raise).

Configuration: `TransformerConfig(vocab_size=23, output_vocab_size=23,
share_embeddings=False, logits_via_embedding=False, emb_dim=16,
num_heads=2, num_layers=2, qkv_dim=16, mlp_dim=24, max_len=12,
dropout_rate=0.1, attention_dropout_rate=0.1, deterministic=True,
decode=False, kernel_init=xavier_uniform(), bias_init=normal(stddev=1e-6),
posemb_init=None)` (wmt's configs/default.py shares the embeddings and
takes the logits through them; not here: two `Embed_0` and a
`logitdense`), on int32 token ids, 0 the padding id: `inputs` [batch, 9]
(source) and `targets` [batch, 8]; `__call__(inputs, targets)` returns
logits [batch, 8, 23].

- `Transformer.setup`: `shared_embedding` is None (share_embeddings
  False), `encoder` = Encoder, `decoder` = Decoder (the names of the two
  top-level submodules are these attribute names). `__call__` runs
  `encode(inputs)`, then `decode(encoded, inputs, targets)`.
- The encoder mask (`encode`): `make_attention_mask(inputs > 0, inputs >
  0)`, [batch, 1, 9, 9]: query q may see key k iff inputs[q] > 0 and
  inputs[k] > 0 (not causal).
- The decoder's self-attention mask (`decode`, from the *unshifted*
  targets): `combine_masks(make_attention_mask(targets > 0, targets >
  0), make_causal_mask(targets))`, [batch, 1, 8, 8]: q may see k iff
  targets[q] > 0 and targets[k] > 0 and k <= q.
- The encoder-decoder mask (`decode`): `make_attention_mask(targets > 0,
  inputs > 0)`, [batch, 1, 8, 9]: target query q may see source key k
  iff targets[q] > 0 and inputs[k] > 0. All three are float 1.0 / 0.0,
  shared by the heads.
- `encoder` (Encoder): `Embed_0` (23 x 16, init normal(1.0)) looks the
  source ids up (no scaling by sqrt(d)); `posembed_input`
  (AddPositionEmbs) adds rows 0 .. 8 of the fixed sinusoidal table;
  Dropout; `encoderblock_0`, `encoderblock_1` (each given the encoder
  mask); `encoder_norm` (LayerNorm): "encoded" [batch, 9, 16].
- `decoder` (Decoder): y = `shift_right`(targets): y[:, 0] = 0 and y[:,
  i] = targets[:, i - 1], the last target dropped (the source slices
  `padded[:, :-1]`, axis 1 whatever `axis` says); its own `Embed_0` (23 x
  16, normal(1.0)) looks y up; `posembed_output` adds rows 0 .. 7 of the
  same table; Dropout; `encoderdecoderblock_0`, `encoderdecoderblock_1`
  (each given "encoded", the decoder mask and the encoder-decoder mask);
  `encoderdecoder_norm` (LayerNorm); `logitdense` Dense(23)
  (logits_via_embedding is False).
- The sinusoidal table (`sinusoidal_init(max_len=12)`, min_scale 1,
  max_scale 10000; no parameter, posemb_init is None): d = 16, half = 8,
  div[j] = 10000^(-j / 7) for j = 0 .. 7, table[p, j] = sin(p div[j]) and
  table[p, 8 + j] = cos(p div[j]), p = 0 .. 11: sines first, cosines
  second (not interleaved), the exponent over half - 1 = 7, position 0
  first. numpy computes it in float64 and stores it in a float32 array,
  so the table is float32 even in the float64 run below. "pos_embedding"
  holds the whole [1, 12, 16] table as Flax makes it. The encoder and the
  decoder add the same table, each from position 0.
- Each encoderblock (pre-norm): x = `LayerNorm_0`(inputs); x =
  `MultiHeadDotProductAttention_0`(x, mask=encoder_mask) (self-attention:
  inputs_k and inputs_v default to x); Dropout; x = x + inputs; y =
  `LayerNorm_1`(x); y = `MlpBlock_0`(y); return x + y.
- Each encoderdecoderblock (pre-norm, three sublayers): x =
  `LayerNorm_0`(targets); x = `MultiHeadDotProductAttention_0`(x,
  mask=decoder_mask) (self-attention); Dropout; x = x + targets; y =
  `LayerNorm_1`(x); y = `MultiHeadDotProductAttention_1`(y, encoded,
  mask=encoder_decoder_mask) (cross-attention: queries from y, keys and
  values both from "encoded", the encoder's output after `encoder_norm`);
  Dropout; y = y + x; z = `LayerNorm_2`(y); z = `MlpBlock_0`(z); return
  y + z.
- MlpBlock: `Dense_0` 16 -> 24, relu (not gelu), Dropout, `Dense_1` 24 ->
  16, Dropout; both Dense with biases.
- Every attention is `nn.MultiHeadDotProductAttention` (none is
  `nn.SelfAttention`, unlike lm1b's): 2 heads, qkv_features 16 (qkv_dim),
  so 8 features a head; out_features defaults to the query input's 16.
  `use_bias=False`: `query`, `key`, `value` have kernels (16, 2, 8)
  (the cross-attention's key and value too, "encoded" being 16 wide) and
  `out` (2, 8, 16), and no biases anywhere in the attentions. The query
  is divided by sqrt(8); logits einsum('...qhd,...khd->...hqk'); where
  the mask is 0 the logit is *replaced* by jnp.finfo(dtype).min
  (float32's -3.4028235e38 here, float64's in the float64 run), then
  softmax over the keys. A padded query row (inputs[q] == 0 in the
  encoder, targets[q] == 0 in the decoder's two attentions) is masked
  everywhere, so all its logits are the same finfo.min and its softmax is
  uniform over all keys (all 9 source positions, padded ones included,
  in the encoder and the cross-attention; all 8 target positions, future
  and padded ones included, in the decoder's self-attention): those
  positions' outputs, and so "out" and "loss", depend on the whole
  sequences. Attention dropout (rate 0.1, broadcast_dropout=False) is
  off (deterministic).
- Dropout (rate 0.1) sits after each posembed, after each attention
  (before its residual) and twice in each MlpBlock; off everywhere here
  (deterministic=True in the config).

Flax semantics a port must match: every LayerNorm has epsilon 1e-6,
(x - mean) / sqrt(var + 1e-6), var = max(0, mean(x^2) - mean(x)^2) over
the last axis, scale and bias per feature. Dense kernels are (in, out);
the attention's DenseGeneral kernels (in, heads, head_dim) and (heads,
head_dim, out). Initialisers (they matter only for "train", which starts
from Flax's init): Dense and attention kernels xavier_uniform (the
attention's on the flattened (16, 16) kernel, as DenseGeneral draws it),
Dense biases normal(1e-6), LayerNorm scale ones and bias zeros, both
Embed normal(1.0).

Parameters (Flax paths and shapes, none boxed; 10887 in all): under
`params/encoder/`: `Embed_0/embedding` (23, 16); for i in 0, 1, under
`encoderblock_i/`: `LayerNorm_0/{scale,bias}` (16),
`MultiHeadDotProductAttention_0/{query,key,value}/kernel` (16, 2, 8),
`MultiHeadDotProductAttention_0/out/kernel` (2, 8, 16),
`LayerNorm_1/{scale,bias}` (16), `MlpBlock_0/Dense_0/kernel` (16, 24),
`/bias` (24), `MlpBlock_0/Dense_1/kernel` (24, 16), `/bias` (16);
`encoder_norm/{scale,bias}` (16). Under `params/decoder/`:
`Embed_0/embedding` (23, 16); for i in 0, 1, under
`encoderdecoderblock_i/`: `LayerNorm_{0,1,2}/{scale,bias}` (16),
`MultiHeadDotProductAttention_{0,1}/{query,key,value}/kernel` (16, 2, 8),
`MultiHeadDotProductAttention_{0,1}/out/kernel` (2, 8, 16),
`MlpBlock_0/Dense_0/kernel` (16, 24), `/bias` (24),
`MlpBlock_0/Dense_1/kernel` (24, 16), `/bias` (16);
`encoderdecoder_norm/{scale,bias}` (16); `logitdense/kernel` (16, 23),
`/bias` (23). The encoder holds 4192 of them, the decoder 6695. The
script prints them as it saves.

The checkpoint: the model initialised by Flax from `PRNGKey(33)` (no
dropout key: deterministic), then every parameter perturbed from a seeded
numpy generator by `fixture_out.perturb` (`p + 0.1 * N(0, 1)`, so the unit
LayerNorm scales, zero LayerNorm biases and near-zero Dense biases hide
nothing). Everything saved is float32.

In flax_port_wmt.json (arrays are `{"shape": [...], "data": [flat
row-major]}`, `flax_keys.arr`):

- "inputs" [4, 9] and "targets" [4, 8]: the token ids (integers stored as
  floats), drawn from `np.random.default_rng(20261234)`: inputs
  `integers(1, 23, (4, 9))`, zeroed after the lengths 9, 7, 5, 8, then
  targets `integers(1, 23, (4, 8))`, zeroed after the lengths 8, 6, 7, 4;
- "out" [4, 8, 23]: the logits (deterministic, so no dropout), from the
  perturbed parameters, at every target position, padded ones included;
- "w" [4, 8, 23]: a fixed standard normal array; "loss" = sum(out * w);
- "grads": d loss / d params keyed "params/<the msgpack's path>"
  ("params/decoder/encoderdecoderblock_0/MultiHeadDotProductAttention_1/query/kernel"),
  in Flax's own layouts;
- "encoded" [4, 9, 16]: the encoder's output (`Transformer.encode`, after
  `encoder_norm`), padded positions included;
- "out_f64", "loss_f64", "grads_f64", "encoded_f64": the same in float64,
  on the float32 checkpoint's values widened (w widened likewise; the
  sinusoidal table float32, as Flax makes it), for a float64 port to be
  held to at 1e-9;
- "encoder_mask" [4, 1, 9, 9], "decoder_mask" [4, 1, 8, 8],
  "encoder_decoder_mask" [4, 1, 8, 9]: the masks above, 1.0 / 0.0;
- "pos_embedding" [1, 12, 16]: the sinusoidal table;
- "paths": the sorted "/" paths of every leaf of the msgpack; "num_params";
- "train": the training curves below.

Training task ("train"): a copy task, 32 pairs drawn from
`np.random.default_rng(20261235)`: the 32 source lengths L first
(`integers(4, 10, 32)`, so 4 .. 9), then the tokens `integers(1, 23,
(32, 9))`, zeroed after each L: "train_inputs" [32, 9]; the targets are
the sources' first 8 columns, "train_targets" [32, 8] (length min(L, 8)).
wmt's objective: the decoder sees shift_right(targets) (and the encoded
source) and predicts the targets; the loss is the mean, over the
non-padding target positions (weights = targets > 0), of the softmax
cross-entropy of the logits against the targets
(`optax.softmax_cross_entropy_with_integer_labels`, summed with the
weights and divided by their sum: wmt's train.py with label_smoothing 0,
where its config has 0.1). `optax.adam(3e-3)`, full batch (all 32 every
step), 40 steps, deterministic (dropout off). Parameters start from
Flax's own initialisation, not perturbed, from `PRNGKey(s)` for the init
seeds s = 1 .. 5. "seeds" ([1, ..., 5]), "steps" (40), "learning_rate"
(3e-3); "losses": per seed, 41 values, the full-batch loss before each
of the 40 steps and after the last; "mean", "std": per step across the 5
seeds (numpy's std, ddof 0); "step0" and "step40": {"mean", "std"} of the
first and last values; "accuracy": per seed, the fraction of the 199
non-padding targets whose argmax logit is right after the 40 steps. The
loss only reads non-padding target positions, whose queries see only
non-padding keys, so the padded positions' uniform attention rows do not
reach it (its gradient on the encoder's `Embed_0` row 0, the padding
id's, is exactly 0; the decoder's row 0 is used, by the 0 that
shift_right puts first). The source lengths 4 .. 9 occur 8, 3, 7, 2, 5,
7 times (target lengths 4 .. 8: 8, 3, 7, 2, 12; 199 targets). Every
target can be copied from the source position it sits at, so the loss
can fall to 0 (a uniform guess over the 22 tokens is ln 22 = 3.09). Run
on CPU (an AMD EPYC machine) this gave a mean loss of 3.5094 at step 0
(std 0.0670), 2.7566 at step 10 (std 0.0889), 2.3712 at step 20 (std
0.1462) and 1.4903 at step 40 (std 0.1723; the five final losses 1.3225
.. 1.7991), final accuracies 0.50 .. 0.73: the task is being learnt, and
the curve is still falling at step 40 (by about 0.045 a step). The
script prints these figures as it runs.

Flax's float32 run is within 8.7e-7 of "out_f64", 1.5e-6 of
"encoded_f64", 1.7e-6 of "loss_f64" and 7.4e-6 of "grads_f64" (at most
1.2e-6 of a leaf's largest gradient). A float64 port must add the
float32-rounded sinusoidal table (as "pos_embedding" holds it): the exact
float64 sines and cosines (at most 2.9e-8 away) move "out_f64" by up to
5.8e-8 and "encoded_f64" by up to 9.7e-8. A plain numpy float64 forward
written from the description above (not part of this script) matched
"out_f64" and "encoded_f64" to 2.1e-15. The script prints the float32 /
float64 gaps as it runs.
"""

from typing import Any, Callable, Optional

from fixture_out import enable_x64_in_f64_pass, grad_gaps, main_f64, normal, perturb, save

# The float64 reference pass (see `wmt_f64`) runs in a process of its own:
# `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import struct  # noqa: E402
from jax import lax  # noqa: E402

from flax_keys import arr, by_path, from_arr, leaves  # noqa: E402

NAME = "flax_port_wmt"


# google/flax examples/wmt/models.py


@struct.dataclass
class TransformerConfig:
    """Global hyperparameters used to minimize obnoxious kwarg plumbing."""

    vocab_size: int
    output_vocab_size: int
    share_embeddings: bool = False
    logits_via_embedding: bool = False
    emb_dim: int = 512
    num_heads: int = 8
    num_layers: int = 6
    qkv_dim: int = 512
    mlp_dim: int = 2048
    max_len: int = 2048
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    deterministic: bool = False
    decode: bool = False
    use_fp8: bool = False
    kernel_init: Callable = nn.initializers.xavier_uniform()
    bias_init: Callable = nn.initializers.normal(stddev=1e-6)
    posemb_init: Optional[Callable] = None


def shift_right(x, axis=1):
    """Shift the input to the right by padding on axis 1."""
    pad_widths = [(0, 0)] * len(x.shape)
    pad_widths[axis] = (1, 0)
    padded = jnp.pad(x, pad_widths, mode="constant", constant_values=x.dtype.type(0))
    return padded[:, :-1]


def sinusoidal_init(max_len=2048, min_scale=1.0, max_scale=10000.0):
    """1D Sinusoidal Position Embedding Initializer: init function returning
    `(1, max_len, d_feature)`."""

    def init(key, shape, dtype=np.float32):
        """Sinusoidal init."""
        del key, dtype
        d_feature = shape[-1]
        pe = np.zeros((max_len, d_feature), dtype=np.float32)
        position = np.arange(0, max_len)[:, np.newaxis]
        scale_factor = -np.log(max_scale / min_scale) / (d_feature // 2 - 1)
        div_term = min_scale * np.exp(np.arange(0, d_feature // 2) * scale_factor)
        pe[:, : d_feature // 2] = np.sin(position * div_term)
        pe[:, d_feature // 2: 2 * (d_feature // 2)] = np.cos(position * div_term)
        pe = pe[np.newaxis, :, :]  # [1, max_len, d_feature]
        return jnp.array(pe)

    return init


class AddPositionEmbs(nn.Module):
    """Adds (optionally learned) positional embeddings to the inputs."""

    config: TransformerConfig
    decode: bool = False

    @nn.compact
    def __call__(self, inputs, inputs_positions=None):
        config = self.config
        # inputs.shape is (batch_size, seq_len, emb_dim)
        assert inputs.ndim == 3, "Number of dimensions should be 3, but it is: %d" % inputs.ndim
        length = inputs.shape[1]
        pos_emb_shape = (1, config.max_len, inputs.shape[-1])
        if config.posemb_init is None:
            # Use a fixed (non-learned) sinusoidal position embedding.
            pos_embedding = sinusoidal_init(max_len=config.max_len)(None, pos_emb_shape, None)
        else:
            pos_embedding = self.param("pos_embedding", config.posemb_init, pos_emb_shape)
        pe = pos_embedding[:, :length, :]

        if self.decode:
            raise NotImplementedError("the decode (cache) path is not retyped here")
        if inputs_positions is None:
            # normal unpacked case:
            return inputs + pe
        else:
            # for packed data we need to use known position indices:
            return inputs + jnp.take(pe[0], inputs_positions, axis=0)


class MlpBlock(nn.Module):
    """Transformer MLP / feed-forward block."""

    config: TransformerConfig
    out_dim: Optional[int] = None

    @nn.compact
    def __call__(self, inputs):
        config = self.config
        actual_out_dim = inputs.shape[-1] if self.out_dim is None else self.out_dim
        x = nn.Dense(
            config.mlp_dim,
            kernel_init=config.kernel_init,
            bias_init=config.bias_init,
            dot_general_cls=nn.Fp8DenseGeneralOp if config.use_fp8 else None,
        )(inputs)
        x = nn.relu(x)
        x = nn.Dropout(rate=config.dropout_rate)(x, deterministic=config.deterministic)
        output = nn.Dense(
            actual_out_dim,
            kernel_init=config.kernel_init,
            bias_init=config.bias_init,
            dot_general_cls=nn.Fp8DenseGeneralOp if config.use_fp8 else None,
        )(x)
        output = nn.Dropout(rate=config.dropout_rate)(output, deterministic=config.deterministic)
        return output


class Encoder1DBlock(nn.Module):
    """Transformer encoder layer."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, inputs, encoder_mask=None):
        config = self.config

        # Attention block.
        assert inputs.ndim == 3
        x = nn.LayerNorm()(inputs)
        x = nn.MultiHeadDotProductAttention(
            num_heads=config.num_heads,
            qkv_features=config.qkv_dim,
            kernel_init=config.kernel_init,
            bias_init=config.bias_init,
            use_bias=False,
            broadcast_dropout=False,
            dropout_rate=config.attention_dropout_rate,
            deterministic=config.deterministic,
        )(x, mask=encoder_mask)

        x = nn.Dropout(rate=config.dropout_rate)(x, deterministic=config.deterministic)
        x = x + inputs

        # MLP block.
        y = nn.LayerNorm()(x)
        y = MlpBlock(config=config)(y)

        return x + y


class EncoderDecoder1DBlock(nn.Module):
    """Transformer encoder-decoder layer."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, targets, encoded, decoder_mask=None, encoder_decoder_mask=None):
        config = self.config

        # Decoder block.
        assert targets.ndim == 3
        x = nn.LayerNorm()(targets)
        x = nn.MultiHeadDotProductAttention(
            num_heads=config.num_heads,
            qkv_features=config.qkv_dim,
            kernel_init=config.kernel_init,
            bias_init=config.bias_init,
            use_bias=False,
            broadcast_dropout=False,
            dropout_rate=config.attention_dropout_rate,
            deterministic=config.deterministic,
            decode=config.decode,
        )(x, mask=decoder_mask)
        x = nn.Dropout(rate=config.dropout_rate)(x, deterministic=config.deterministic)
        x = x + targets

        # Encoder-Decoder block.
        y = nn.LayerNorm()(x)
        y = nn.MultiHeadDotProductAttention(
            num_heads=config.num_heads,
            qkv_features=config.qkv_dim,
            kernel_init=config.kernel_init,
            bias_init=config.bias_init,
            use_bias=False,
            broadcast_dropout=False,
            dropout_rate=config.attention_dropout_rate,
            deterministic=config.deterministic,
        )(y, encoded, mask=encoder_decoder_mask)

        y = nn.Dropout(rate=config.dropout_rate)(y, deterministic=config.deterministic)
        y = y + x

        # MLP block.
        z = nn.LayerNorm()(y)
        z = MlpBlock(config=config)(z)

        return y + z


class Encoder(nn.Module):
    """Transformer Model Encoder for sequence to sequence translation."""

    config: TransformerConfig
    shared_embedding: Any = None

    @nn.compact
    def __call__(self, inputs, inputs_positions=None, encoder_mask=None):
        config = self.config
        assert inputs.ndim == 2  # (batch, len)

        # Input Embedding
        if self.shared_embedding is None:
            input_embed = nn.Embed(
                num_embeddings=config.vocab_size,
                features=config.emb_dim,
                embedding_init=nn.initializers.normal(stddev=1.0),
            )
        else:
            input_embed = self.shared_embedding
        x = inputs.astype("int32")
        x = input_embed(x)
        x = AddPositionEmbs(config=config, decode=False, name="posembed_input")(
            x, inputs_positions=inputs_positions
        )
        x = nn.Dropout(rate=config.dropout_rate)(x, deterministic=config.deterministic)

        # Input Encoder
        for lyr in range(config.num_layers):
            x = Encoder1DBlock(config=config, name=f"encoderblock_{lyr}")(x, encoder_mask)

        encoded = nn.LayerNorm(name="encoder_norm")(x)

        return encoded


class Decoder(nn.Module):
    """Transformer Model Decoder for sequence to sequence translation."""

    config: TransformerConfig
    shared_embedding: Any = None

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
            logits = output_embed.attend(y.astype(jnp.float32))
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


def encoder_mask_of(inputs):
    """Transformer.encode's padding mask (no segmentation)."""
    return nn.make_attention_mask(inputs > 0, inputs > 0)


def decoder_masks_of(inputs, targets):
    """Transformer.decode's masks (decode False, no segmentation): the
    decoder's self-attention mask, padding of the *unshifted* targets and
    causal, and the encoder-decoder mask, targets' padding against the
    inputs'."""
    decoder_mask = nn.combine_masks(
        nn.make_attention_mask(targets > 0, targets > 0),
        nn.make_causal_mask(targets),
    )
    encoder_decoder_mask = nn.make_attention_mask(targets > 0, inputs > 0)
    return decoder_mask, encoder_decoder_mask


class Transformer(nn.Module):
    """Transformer Model for sequence to sequence translation."""

    config: TransformerConfig

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

    def encode(self, inputs, inputs_positions=None, inputs_segmentation=None):
        """Applies Transformer encoder-branch on the inputs."""
        # Make padding attention mask.
        encoder_mask = encoder_mask_of(inputs)
        # Add segmentation block-diagonal attention mask if using segmented data.
        if inputs_segmentation is not None:
            encoder_mask = nn.combine_masks(
                encoder_mask,
                nn.make_attention_mask(inputs_segmentation, inputs_segmentation, jnp.equal),
            )
        return self.encoder(inputs, inputs_positions=inputs_positions, encoder_mask=encoder_mask)

    def decode(
        self,
        encoded,
        inputs,  # only needed for masks
        targets,
        targets_positions=None,
        inputs_segmentation=None,
        targets_segmentation=None,
    ):
        """Applies Transformer decoder-branch on encoded-input and target."""
        config = self.config

        # Make padding attention masks.
        if config.decode:
            raise NotImplementedError("the decode (cache) path is not retyped here")
        decoder_mask, encoder_decoder_mask = decoder_masks_of(inputs, targets)

        # Add segmentation block-diagonal attention masks if using segmented data.
        if inputs_segmentation is not None:
            decoder_mask = nn.combine_masks(
                decoder_mask,
                nn.make_attention_mask(targets_segmentation, targets_segmentation, jnp.equal),
            )
            encoder_decoder_mask = nn.combine_masks(
                encoder_decoder_mask,
                nn.make_attention_mask(targets_segmentation, inputs_segmentation, jnp.equal),
            )
        logits = self.decoder(
            encoded,
            targets,
            targets_positions=targets_positions,
            decoder_mask=decoder_mask,
            encoder_decoder_mask=encoder_decoder_mask,
        )
        return logits

    def __call__(
        self,
        inputs,
        targets,
        inputs_positions=None,
        targets_positions=None,
        inputs_segmentation=None,
        targets_segmentation=None,
    ):
        """Applies Transformer model on the inputs."""
        encoded = self.encode(
            inputs,
            inputs_positions=inputs_positions,
            inputs_segmentation=inputs_segmentation,
        )

        return self.decode(
            encoded,
            inputs,  # only used for masks
            targets,
            targets_positions=targets_positions,
            inputs_segmentation=inputs_segmentation,
            targets_segmentation=targets_segmentation,
        )


CONFIG = TransformerConfig(
    vocab_size=23,
    output_vocab_size=23,
    share_embeddings=False,
    logits_via_embedding=False,
    emb_dim=16,
    num_heads=2,
    num_layers=2,
    qkv_dim=16,
    mlp_dim=24,
    max_len=12,
    dropout_rate=0.1,
    attention_dropout_rate=0.1,
    deterministic=True,
    decode=False,
    kernel_init=nn.initializers.xavier_uniform(),
    bias_init=nn.initializers.normal(stddev=1e-6),
    posemb_init=None,
)


def make_model():
    return Transformer(config=CONFIG)


# The fixture (as in make_flax_lm1b.py, less its boxes: the wmt model has
# no partitioning wrappers, so the leaves are plain arrays).

BATCH, IN_LEN, OUT_LEN = 4, 9, 8
INPUT_LENGTHS = [9, 7, 5, 8]
TARGET_LENGTHS = [8, 6, 7, 4]


def wmt_loss(logits, targets):
    """Mean softmax cross-entropy over the non-padding targets."""
    weights = (targets > 0).astype(logits.dtype)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return jnp.sum(ce * weights) / jnp.sum(weights)


# The training task.

TRAIN_N = 32
TRAIN_STEPS = 40
TRAIN_SEEDS = [1, 2, 3, 4, 5]
LEARNING_RATE = 3e-3


def train_data():
    """32 copy pairs: a source of L random tokens in 1 .. 22, L in 4 .. 9,
    zeros after (length 9); its target the source's first 8 tokens."""
    rng = np.random.default_rng(20261235)
    lengths = rng.integers(4, 10, TRAIN_N)
    inputs = rng.integers(1, 23, (TRAIN_N, IN_LEN)).astype(np.int32)
    for i, n in enumerate(lengths):
        inputs[i, n:] = 0
    targets = inputs[:, :OUT_LEN].copy()
    return inputs, targets


def train_curves(model, inputs, targets):
    tx = optax.adam(LEARNING_RATE)
    xs, ys = jnp.asarray(inputs), jnp.asarray(targets)

    def loss_fn(params):
        logits = model.apply({"params": params}, xs, ys)
        return wmt_loss(logits, ys), logits

    @jax.jit
    def step(params, state):
        (loss, _), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, state = tx.update(g, state, params)
        return optax.apply_updates(params, updates), state, loss

    final_loss = jax.jit(loss_fn)
    weights = targets > 0
    losses, accuracy = [], []
    for seed in TRAIN_SEEDS:
        params = model.init(jax.random.PRNGKey(seed), xs, ys)["params"]
        state = tx.init(params)
        curve = []
        for _ in range(TRAIN_STEPS):
            params, state, loss = step(params, state)
            curve.append(float(loss))
        loss, logits = final_loss(params)
        curve.append(float(loss))
        losses.append(curve)
        hits = (np.argmax(np.asarray(logits), axis=-1) == targets) & weights
        accuracy.append(float(hits.sum() / weights.sum()))
    curves = np.asarray(losses)
    mean, std = curves.mean(axis=0), curves.std(axis=0)
    src_len = (inputs > 0).sum(axis=1)
    tgt_len = weights.sum(axis=1)
    print(f"train: {TRAIN_N} copy pairs, source lengths {src_len.min()} .. {src_len.max()} "
          f"(counts {np.bincount(src_len, minlength=10)[4:].tolist()} for 4 .. 9), "
          f"{tgt_len.sum()} targets, adam({LEARNING_RATE}), {TRAIN_STEPS} full-batch steps, "
          f"seeds {TRAIN_SEEDS}; uniform guess ln 22 = {np.log(22):.4f}")
    for s in (0, 10, 20, 40):
        print(f"  step {s}: mean loss {mean[s]:.4f}, std {std[s]:.4f}")
    print(f"  final losses per seed: {[round(c[-1], 4) for c in losses]}")
    print(f"  final token accuracy per seed: {[round(a, 4) for a in accuracy]}")
    return {
        "train_inputs": arr(inputs),
        "train_targets": arr(targets),
        "seeds": TRAIN_SEEDS,
        "steps": TRAIN_STEPS,
        "learning_rate": LEARNING_RATE,
        "losses": losses,
        "mean": [float(v) for v in mean],
        "std": [float(v) for v in std],
        "step0": {"mean": float(mean[0]), "std": float(std[0])},
        "step40": {"mean": float(mean[-1]), "std": float(std[-1])},
        "accuracy": accuracy,
    }


# The fixture.


def test_tokens(rng, length, lengths):
    tokens = rng.integers(1, 23, (BATCH, length)).astype(np.int32)
    for i, n in enumerate(lengths):
        tokens[i, n:] = 0
    return tokens


def wmt(out):
    rng = np.random.default_rng(20261234)
    model = make_model()
    inputs = test_tokens(rng, IN_LEN, INPUT_LENGTHS)
    targets = test_tokens(rng, OUT_LEN, TARGET_LENGTHS)
    w = normal(rng, (BATCH, OUT_LEN, CONFIG.output_vocab_size))
    xs, ys = jnp.asarray(inputs), jnp.asarray(targets)
    variables = perturb(model.init(jax.random.PRNGKey(33), xs, ys), rng)

    def loss_fn(params):
        y = model.apply({"params": params}, xs, ys)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert y.shape == (BATCH, OUT_LEN, 23) and y.dtype == jnp.float32
    encoded = model.apply(variables, xs, method=Transformer.encode)
    assert encoded.shape == (BATCH, IN_LEN, CONFIG.emb_dim)
    decoder_mask, encoder_decoder_mask = decoder_masks_of(xs, ys)
    table = sinusoidal_init(max_len=CONFIG.max_len)(None, (1, CONFIG.max_len, CONFIG.emb_dim))
    print(f"{NAME}: input lengths {INPUT_LENGTHS}, target lengths {TARGET_LENGTHS}, "
          f"shift_right(targets)[0] = {np.asarray(shift_right(ys))[0].tolist()}")
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


def wmt_f64(fields, variables):
    """Adds to flax_port_wmt.json's fields the same forward and gradient in
    float64, on the float32 checkpoint's values widened (`variables`):
    "out_f64", "loss_f64", "grads_f64", and the encoder's output
    "encoded_f64"."""
    model = make_model()
    xs = jnp.asarray(from_arr(fields["inputs"]).astype(np.int32))
    ys = jnp.asarray(from_arr(fields["targets"]).astype(np.int32))
    w = from_arr(fields["w"])

    def loss_fn(params):
        y = model.apply({"params": params}, xs, ys)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    encoded = model.apply(variables, xs, method=Transformer.encode)
    assert y.dtype == jnp.float64 and encoded.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in leaves(grads).values())
    fields["out_f64"] = arr(y)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = by_path(grads, "params")
    fields["encoded_f64"] = arr(encoded)
    assert sorted(fields["grads_f64"]) == sorted(fields["grads"]) == fields["paths"]
    out32 = from_arr(fields["out"])
    gap, rel = grad_gaps(fields)
    print(f"{NAME} float64: max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e}, "
          f"max |encoded - encoded_f64| {np.max(np.abs(from_arr(fields['encoded']) - np.asarray(encoded))):.2e}, "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e}, max |grads - grads_f64| {gap:.2e} "
          f"({rel:.2e} of a leaf's largest)")


if __name__ == "__main__":
    main_f64(__file__, wmt, NAME, wmt_f64)
