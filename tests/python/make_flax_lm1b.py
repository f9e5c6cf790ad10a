"""Writes the fixture of a Transformer language model port: a Flax
checkpoint of the `TransformerLM` of google/flax examples/lm1b/models.py
(linen), saved exactly as `flax.serialization.to_bytes(variables)` returns
it (boxed leaves included), with its logits and gradients in float32 and
float64, and the loss curves of a small training task both sides can run
from the data stored here.

    /tmp/venv/bin/python tests/python/make_flax_lm1b.py [OUTDIR]

writes tests/fixtures/flax_port_lm1b.{msgpack,json}, or those files in
OUTDIR to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, optax 0.2.8, numpy 2.4.6, msgpack 1.2.4 made the
committed files (Python 3.11; requirements.txt). The float64 results come
from a second run of the script in a process of its own
(`fixture_out.main_f64`), since `jax_enable_x64` is process-wide.

The model is retyped here from examples/lm1b/models.py (read at commit
0e5fc04018f1a20bdf32e9868c6a9eda38407424, the version whose initialisers
are wrapped in `nn.with_logical_partitioning`; the older version at
f095d13dd6a74bd14f22cae0f9887bcc0b5ac3eb has the same model without the
wrappers, whose checkpoint has the same paths less the final "/value"):
`TransformerConfig`,
`shift_right`, `shift_inputs`, `sinusoidal_init`, `AddPositionEmbs`,
`MlpBlock`, `EncoderDecoder1DBlock`, `Decoder`, `TransformerLM`, with the
same attributes, defaults, initialisers (partitioning wrappers included),
submodule names and call order. Dropped: the autoregressive decode path
(`decode` is False throughout: no `cache` collection, no `cache_index`,
the attention's `decode=False`; `decode` stays an attribute, and True
raises), and `dtype` (float32 throughout: the source passes
`config.dtype` to every Dense, LayerNorm and the attention, casts the
embedded tokens and the logits to it, and makes the masks in it; the masks
here are `make_attention_mask`'s and `make_causal_mask`'s default float32,
and nothing is cast, so the float64 run below stays float64 to the
logits). `inputs_positions` and `inputs_segmentation` are kept but never
given.

Configuration: `TransformerConfig(vocab_size=30, output_vocab_size=30,
share_embeddings=False, logits_via_embedding=False, emb_dim=16,
num_heads=2, num_layers=2, qkv_dim=16, mlp_dim=24, max_len=12,
dropout_rate=0.1, attention_dropout_rate=0.1, deterministic=True,
decode=False, kernel_init=xavier_uniform(), bias_init=normal(stddev=1e-6),
posemb_init=None)`, on int32 token ids [batch, 10], 0 the padding id.

- The decoder mask (TransformerLM, from the *unshifted* inputs):
  `combine_masks(make_attention_mask(inputs > 0, inputs > 0),
  make_causal_mask(inputs))`, [batch, 1, 10, 10]: query q may see key k
  iff inputs[q] > 0 and inputs[k] > 0 and k <= q (float 1.0 / 0.0,
  shared by the heads).
- `decoder` (Decoder): y = `shift_right`(inputs) (`shift_inputs` without
  segment ids): y[:, 0] = 0 and y[:, i] = inputs[:, i - 1], the last
  token dropped; `Embed_0` (30 x 16, init normal(1.0)) looks the ids up;
  `posembed_output` (AddPositionEmbs) adds rows 0 .. 9 of the fixed
  sinusoidal table (no parameter: posemb_init is None); Dropout; then
  `encoderdecoderblock_0`, `encoderdecoderblock_1`; `encoderdecoder_norm`
  (LayerNorm); `logitdense` Dense(30) (logits_via_embedding is False).
- The sinusoidal table (`sinusoidal_init(max_len=12)`, min_scale 1,
  max_scale 10000): d = 16, half = d // 2 = 8, div[j] = exp(-j ln(10000)
  / (half - 1)) = 10000^(-j / 7) for j = 0 .. 7, table[p, j] = sin(p
  div[j]) and table[p, 8 + j] = cos(p div[j]) for positions p = 0 .. 11:
  sines in the first half, cosines in the second (not interleaved), the
  exponent over half - 1 = 7 (not d / 2), position 0 first (its row is 8
  zeros then 8 ones). numpy computes it in float64 and stores it in a
  float32 array, so the table is float32 even in the float64 run below.
  A sequence of length 10 adds table[0:10]. "pos_embedding" holds the
  whole [1, 12, 16] table as Flax makes it.
- Each encoderdecoderblock (pre-norm): x = `LayerNorm_0`(inputs); x =
  `SelfAttention_0`(x, decoder_mask); Dropout; x = x + inputs; z =
  `LayerNorm_1`(x); z = `MlpBlock_0`(z): `Dense_0` 16 -> 24, relu (not
  gelu), Dropout, `Dense_1` 24 -> 16, Dropout; return x + z.
- The attention (`nn.SelfAttention`, a MultiHeadDotProductAttention with
  inputs_kv = inputs_q; deprecated in flax 0.12, which warns): 2 heads,
  qkv_features 16 (qkv_dim), so 8 features a head; out_features defaults
  to the input's 16. `use_bias=False`: `query`, `key`, `value` have
  kernels (16, 2, 8) and `out` (2, 8, 16), and no biases anywhere in the
  attention. The query is divided by sqrt(8); logits
  einsum('...qhd,...khd->...hqk'); where the mask is 0 the logit is
  *replaced* by jnp.finfo(dtype).min (float32's -3.4028235e38 here,
  float64's in the float64 run), then softmax over the keys. A padded
  query row (inputs[q] == 0) is masked everywhere, so all its logits are
  the same finfo.min and its softmax is uniform over all 10 keys,
  future and padded ones included: those positions' outputs, and so
  "out" and "loss", depend on the whole sequence. Attention dropout
  (rate 0.1, broadcast_dropout=False) is off (deterministic).
- Dropout is off everywhere (deterministic=True in the config).

Flax semantics a port must match: every LayerNorm has epsilon 1e-6,
(x - mean) / sqrt(var + 1e-6), var = max(0, mean(x^2) - mean(x)^2) over
the last axis, scale and bias per feature. Dense kernels are (in, out);
the attention's DenseGeneral kernels (in, heads, head_dim) and (heads,
head_dim, out). Initialisers (they matter only for "train", which starts
from Flax's init): Dense and attention kernels xavier_uniform (the
attention's on the flattened (16, 16) kernel, as DenseGeneral draws it),
Dense biases normal(1e-6), LayerNorm scale ones and bias zeros, Embed
normal(1.0).

Boxed leaves: `nn.with_logical_partitioning` wraps every initialiser, so
every parameter is an `nn.LogicallyPartitioned` box, and `to_bytes` saves
each as a map {"value": array} (the axis names are not saved): every
path in the msgpack ends in "/value"
("params/decoder/Embed_0/embedding/value"). Each box holds one array and
is counted once. The attention kernels' boxes carry 2 axis names,
('embed', 'kv'), on 3-axis arrays (DenseGeneral reshapes the boxed value
after drawing it flat); without a mesh nothing checks that.

Parameters (Flax paths without the "/value" and shapes; 4814 in all):
under `params/decoder/`: `Embed_0/embedding` (30, 16); for i in 0, 1,
under `encoderdecoderblock_i/`: `LayerNorm_0/{scale,bias}` (16),
`SelfAttention_0/{query,key,value}/kernel` (16, 2, 8),
`SelfAttention_0/out/kernel` (2, 8, 16), `LayerNorm_1/{scale,bias}` (16),
`MlpBlock_0/Dense_0/kernel` (16, 24), `/bias` (24),
`MlpBlock_0/Dense_1/kernel` (24, 16), `/bias` (16);
`encoderdecoder_norm/{scale,bias}` (16); `logitdense/kernel` (16, 30),
`/bias` (30). The script prints them as it saves.

The checkpoint: the model initialised by Flax from `PRNGKey(32)` (no
dropout key: deterministic), then every parameter perturbed from a seeded
numpy generator by `fixture_out.perturb` (`p + 0.1 * N(0, 1)`, so the unit
LayerNorm scales, zero LayerNorm biases and near-zero Dense biases hide
nothing), inside its box. Everything saved is float32.

In flax_port_lm1b.json (arrays are `{"shape": [...], "data": [flat
row-major]}`, `flax_keys.arr`):

- "tokens" [4, 10]: the token ids (integers stored as floats), drawn
  uniform in 1 .. 29 from `np.random.default_rng(20261232)`
  (`integers(1, 30, (4, 10))`), then zeroed after the lengths 10, 8, 6, 9;
- "out" [4, 10, 30]: the logits (deterministic, so no dropout), from the
  perturbed parameters, at every position, padded ones included;
- "w" [4, 10, 30]: a fixed standard normal array; "loss" = sum(out * w);
- "grads": d loss / d params keyed "params/<the msgpack's path>", so
  ending in "/value"
  ("params/decoder/encoderdecoderblock_0/SelfAttention_0/query/kernel/value"),
  in Flax's own layouts;
- "out_f64", "loss_f64", "grads_f64": the same in float64, on the
  float32 checkpoint's values widened (w widened likewise; the sinusoidal
  table float32, as Flax makes it), for a float64 port to be held to at
  1e-9;
- "decoder_mask" [4, 1, 10, 10]: the mask above, 1.0 / 0.0;
- "pos_embedding" [1, 12, 16]: the sinusoidal table;
- "paths": the sorted "/" paths of every leaf of the msgpack; "num_params";
- "train": the training curves below.

Training task ("train"): 32 sequences [32, 10] ("train_tokens", ids as
floats) drawn from `np.random.default_rng(20261233)`: the 32 starts s
first (`integers(1, 30, 32)`), then the 32 lengths L (`integers(6, 11,
32)`, so 6 .. 10); sequence i holds t_k = ((s - 1 + k) mod 29) + 1 for k
= 0 .. L - 1 (counting up from s through 29 and round to 1) and zeros
after. lm1b's objective: the model sees shift_right(tokens) and predicts
the tokens themselves; the loss is the mean, over the non-padding target
positions (weights = tokens > 0), of the softmax cross-entropy of the
logits against the tokens (`optax.softmax_cross_entropy_with_integer_labels`,
summed with the weights and divided by the number of such positions, as
lm1b's train.py does with label_smoothing 0). `optax.adam(3e-3)`, full
batch (all 32 every step), 40 steps, deterministic (dropout off).
Parameters start from Flax's own initialisation, not perturbed, from
`PRNGKey(s)` for the init seeds s = 1 .. 5. "seeds" ([1, ..., 5]), "steps"
(40), "learning_rate" (3e-3); "losses": per seed, 41 values, the
full-batch loss before each of the 40 steps and after the last; "mean",
"std": per step across the 5 seeds (numpy's std, ddof 0); "step0" and
"step40": {"mean", "std"} of the first and last values. The first token
of a sequence follows the 0 of the shift and cannot be predicted (at
best ln 29 = 3.37 there); every later one is the previous plus one
(mod 29), so the loss can fall to ln 29 * 32 / 256 = 0.4209 (32
unpredictable first tokens among the 256 targets; the mean length is
8.0). 12 of the 32 sequences wrap from 29 to 1; the lengths 6 .. 10
occur 4, 8, 9, 6, 5 times. Run on CPU (an AMD EPYC machine) this gave a
mean loss of 3.7710 at step 0 (std 0.1263), 2.8599 at step 10 (std
0.1495), 2.2355 at step 20 (std 0.1515) and 1.3477 at step 40 (std
0.1146; the five final losses 1.1533 .. 1.4479): the task is being
learnt, and the curve is still falling at step 40 (by about 0.04 a
step). The script prints these figures as it runs.

Flax's float32 run is within 6.7e-7 of "out_f64", 1.9e-5 of "loss_f64"
and 6.4e-6 of "grads_f64" (at most 7.8e-7 of a leaf's largest gradient).
A float64 port must add the float32-rounded sinusoidal table (as
"pos_embedding" holds it): the exact float64 sines and cosines (at most
2.9e-8 away) move "out_f64" by up to 8.6e-8. A plain numpy float64
forward written from the description above (not part of this script)
matched "out_f64" to 1.3e-15. The script prints the float32 / float64
gaps as it runs.
"""

import warnings
from typing import Any, Callable, Optional

from fixture_out import enable_x64_in_f64_pass, grad_gaps, main_f64, normal, perturb, save

# The float64 reference pass (see `lm1b_f64`) runs in a process of its own:
# `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import struct  # noqa: E402
from jax import lax  # noqa: E402

from flax_keys import arr, by_path, from_arr, leaves  # noqa: E402

NAME = "flax_port_lm1b"

# nn.SelfAttention warns on every call that it is to be deprecated.
warnings.filterwarnings("ignore", message="SelfAttention will be deprecated", category=DeprecationWarning)


# google/flax examples/lm1b/models.py


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
    kernel_init: Callable = nn.initializers.xavier_uniform()
    bias_init: Callable = nn.initializers.normal(stddev=1e-6)
    posemb_init: Optional[Callable] = None


def shift_right(x, axis=1):
    """Shift the input to the right by padding and slicing on axis."""
    pad_widths = [(0, 0)] * len(x.shape)
    pad_widths[axis] = (1, 0)
    padded = jnp.pad(x, pad_widths, mode="constant", constant_values=x.dtype.type(0))
    return lax.dynamic_slice_in_dim(padded, 0, padded.shape[axis] - 1, axis)


def shift_inputs(x, segment_ids=None, axis=1):
    """Shift inputs and replace EOS by 0 for packed inputs."""
    shifted = shift_right(x, axis=axis)
    # For packed targets, the first shifted token of a new sequence is made
    # 0, rather than being the EOS token for the last sequence.
    if segment_ids is not None:
        shifted *= segment_ids == shift_right(segment_ids, axis=axis)
    return shifted


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
            kernel_init=nn.with_logical_partitioning(config.kernel_init, ("embed", "mlp")),
            bias_init=nn.with_logical_partitioning(config.bias_init, ("mlp",)),
        )(inputs)
        x = nn.relu(x)
        x = nn.Dropout(rate=config.dropout_rate)(x, deterministic=config.deterministic)
        output = nn.Dense(
            actual_out_dim,
            kernel_init=nn.with_logical_partitioning(config.kernel_init, ("mlp", "embed")),
            bias_init=nn.with_logical_partitioning(config.bias_init, ("embed",)),
        )(x)
        output = nn.Dropout(rate=config.dropout_rate)(output, deterministic=config.deterministic)
        return output


class EncoderDecoder1DBlock(nn.Module):
    """Transformer encoder-decoder layer."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, inputs, decoder_mask=None, encoder_decoder_mask=None):
        config = self.config

        # Decoder block.
        assert inputs.ndim == 3
        x = nn.LayerNorm(
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        )(inputs)
        x = nn.SelfAttention(
            num_heads=config.num_heads,
            qkv_features=config.qkv_dim,
            kernel_init=nn.with_logical_partitioning(config.kernel_init, ("embed", "kv")),
            bias_init=nn.with_logical_partitioning(config.bias_init, ("embed",)),
            use_bias=False,
            broadcast_dropout=False,
            dropout_rate=config.attention_dropout_rate,
            deterministic=config.deterministic,
            decode=config.decode,
        )(x, decoder_mask)
        x = nn.Dropout(rate=config.dropout_rate)(x, deterministic=config.deterministic)
        x = x + inputs

        # MLP block.
        z = nn.LayerNorm(
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        )(x)
        z = MlpBlock(config=config)(z)

        return x + z


class Decoder(nn.Module):
    """Transformer Model Decoder for sequence to sequence translation."""

    config: TransformerConfig
    shared_embedding: Any = None

    @nn.compact
    def __call__(
        self,
        inputs,
        inputs_positions=None,
        inputs_segmentation=None,
        decoder_mask=None,
        encoder_decoder_mask=None,
    ):
        config = self.config
        assert inputs.ndim == 2  # (batch, len)

        # Target Embedding
        if self.shared_embedding is None:
            output_embed = nn.Embed(
                num_embeddings=config.output_vocab_size,
                features=config.emb_dim,
                embedding_init=nn.with_logical_partitioning(
                    nn.initializers.normal(stddev=1.0), ("vocab", "embed")
                ),
            )
        else:
            output_embed = self.shared_embedding

        y = inputs.astype("int32")
        if not config.decode:
            y = shift_inputs(y, segment_ids=inputs_segmentation)
        y = output_embed(y)
        y = AddPositionEmbs(config=config, decode=config.decode, name="posembed_output")(
            y, inputs_positions=inputs_positions
        )
        y = nn.Dropout(rate=config.dropout_rate)(y, deterministic=config.deterministic)

        # Target-Input Decoder
        for lyr in range(config.num_layers):
            y = EncoderDecoder1DBlock(config=config, name=f"encoderdecoderblock_{lyr}")(
                y, decoder_mask=decoder_mask, encoder_decoder_mask=encoder_decoder_mask
            )
        y = nn.LayerNorm(
            name="encoderdecoder_norm",
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        )(y)

        # Decoded Logits
        if config.logits_via_embedding:
            # Use the transpose of embedding matrix for logit transform.
            logits = output_embed.attend(y.astype(jnp.float32))
            # Correctly normalize pre-softmax logits for this shared case.
            logits = logits / jnp.sqrt(y.shape[-1])
        else:
            logits = nn.Dense(
                config.output_vocab_size,
                kernel_init=nn.with_logical_partitioning(config.kernel_init, ("embed", "vocab")),
                bias_init=nn.with_logical_partitioning(config.bias_init, ("vocab",)),
                name="logitdense",
            )(y)
        return logits


def decoder_mask_of(inputs):
    """TransformerLM's mask (decode False): padding mask of the unshifted
    inputs, combined with the causal mask."""
    return nn.combine_masks(
        nn.make_attention_mask(inputs > 0, inputs > 0),
        nn.make_causal_mask(inputs),
    )


class TransformerLM(nn.Module):
    """Transformer pure decoder stack for language modelling."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, inputs, inputs_positions=None, inputs_segmentation=None):
        config = self.config

        # Make padding attention masks.
        if config.decode:
            raise NotImplementedError("the decode (cache) path is not retyped here")
        decoder_mask = decoder_mask_of(inputs)

        # Add segmentation block-diagonal attention masks if using segmented data.
        if inputs_segmentation is not None:
            decoder_mask = nn.combine_masks(
                decoder_mask,
                nn.make_attention_mask(inputs_segmentation, inputs_segmentation, jnp.equal),
            )

        logits = Decoder(config=config, shared_embedding=None, name="decoder")(
            inputs,
            inputs_positions=inputs_positions,
            inputs_segmentation=inputs_segmentation,
            decoder_mask=decoder_mask,
            encoder_decoder_mask=None,
        )
        return logits


CONFIG = TransformerConfig(
    vocab_size=30,
    output_vocab_size=30,
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
    return TransformerLM(config=CONFIG)


# The fixture. The boxes of `nn.with_logical_partitioning` are flattened
# through Flax's state dict, the tree `to_bytes` writes, so each
# parameter's path ends in "value" (`flax_keys.leaves`).

BATCH, LENGTH = 4, 10
LENGTHS = [10, 8, 6, 9]


def lm1b_loss(logits, targets):
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
    """32 counting sequences: start s in 1 .. 29, t_k = ((s - 1 + k) mod 29)
    + 1 for k < L, L in 6 .. 10, zeros after."""
    rng = np.random.default_rng(20261233)
    starts = rng.integers(1, 30, TRAIN_N)
    lengths = rng.integers(6, 11, TRAIN_N)
    tokens = np.zeros((TRAIN_N, LENGTH), np.int32)
    for i, (s, n) in enumerate(zip(starts, lengths)):
        tokens[i, :n] = (s - 1 + np.arange(n)) % 29 + 1
    return tokens


def train_curves(model, tokens):
    tx = optax.adam(LEARNING_RATE)
    xs = jnp.asarray(tokens)

    def loss_fn(params):
        return lm1b_loss(model.apply({"params": params}, xs), xs)

    @jax.jit
    def step(params, state):
        loss, g = jax.value_and_grad(loss_fn)(params)
        updates, state = tx.update(g, state, params)
        return optax.apply_updates(params, updates), state, loss

    final_loss = jax.jit(loss_fn)
    losses = []
    for seed in TRAIN_SEEDS:
        params = model.init(jax.random.PRNGKey(seed), xs)["params"]
        state = tx.init(params)
        curve = []
        for _ in range(TRAIN_STEPS):
            params, state, loss = step(params, state)
            curve.append(float(loss))
        curve.append(float(final_loss(params)))
        losses.append(curve)
    curves = np.asarray(losses)
    mean, std = curves.mean(axis=0), curves.std(axis=0)
    lengths = (tokens > 0).sum(axis=1)
    print(f"train: {TRAIN_N} counting sequences, lengths {lengths.min()} .. {lengths.max()} "
          f"(mean {lengths.mean():.3f}, {lengths.sum()} targets), adam({LEARNING_RATE}), "
          f"{TRAIN_STEPS} full-batch steps, seeds {TRAIN_SEEDS}; floor about "
          f"ln 29 / mean length = {np.log(29) * TRAIN_N / lengths.sum():.4f}")
    for s in (0, 10, 20, 40):
        print(f"  step {s}: mean loss {mean[s]:.4f}, std {std[s]:.4f}")
    print(f"  final losses per seed: {[round(c[-1], 4) for c in losses]}")
    return {
        "train_tokens": arr(tokens),
        "seeds": TRAIN_SEEDS,
        "steps": TRAIN_STEPS,
        "learning_rate": LEARNING_RATE,
        "losses": losses,
        "mean": [float(v) for v in mean],
        "std": [float(v) for v in std],
        "step0": {"mean": float(mean[0]), "std": float(std[0])},
        "step40": {"mean": float(mean[-1]), "std": float(std[-1])},
    }


# The fixture.


def test_tokens(rng):
    tokens = rng.integers(1, 30, (BATCH, LENGTH)).astype(np.int32)
    for i, n in enumerate(LENGTHS):
        tokens[i, n:] = 0
    return tokens


def lm1b(out):
    rng = np.random.default_rng(20261232)
    model = make_model()
    tokens = test_tokens(rng)
    w = normal(rng, (BATCH, LENGTH, CONFIG.output_vocab_size))
    xs = jnp.asarray(tokens)
    init = model.init(jax.random.PRNGKey(32), xs)
    variables = flax.serialization.from_state_dict(init, perturb(init, rng))
    assert all(path.endswith("/value") for path in leaves(variables)), "every parameter boxed"

    def loss_fn(params):
        y = model.apply({"params": params}, xs)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert y.shape == (BATCH, LENGTH, 30) and y.dtype == jnp.float32
    mask = decoder_mask_of(xs)
    table = sinusoidal_init(max_len=CONFIG.max_len)(None, (1, CONFIG.max_len, CONFIG.emb_dim))
    print(f"{NAME}: tokens lengths {LENGTHS}, shift_right(tokens)[0] = {np.asarray(shift_right(xs))[0].tolist()}")
    save(out, NAME, variables, {
        "tokens": arr(tokens),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": by_path(grads, "params"),
        "decoder_mask": arr(mask),
        "pos_embedding": arr(table),
        "train": train_curves(model, train_data()),
    })


def lm1b_f64(fields, state):
    """Adds to flax_port_lm1b.json's fields the same forward and gradient
    in float64, on the float32 checkpoint's values widened (`state`, the
    msgpack's tree without its boxes): "out_f64", "loss_f64",
    "grads_f64"."""
    model = make_model()
    tokens = jnp.asarray(from_arr(fields["tokens"]).astype(np.int32))
    w = from_arr(fields["w"])
    # The boxes come from a fresh init; their values from the msgpack.
    template = model.init(jax.random.PRNGKey(0), tokens)
    variables = flax.serialization.from_state_dict(template, state)

    def loss_fn(params):
        y = model.apply({"params": params}, tokens)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert y.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in leaves(grads).values())
    fields["out_f64"] = arr(y)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = by_path(grads, "params")
    assert sorted(fields["grads_f64"]) == sorted(fields["grads"]) == fields["paths"]
    out32 = from_arr(fields["out"])
    gap, rel = grad_gaps(fields)
    print(f"{NAME} float64: max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e}, "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e}, max |grads - grads_f64| {gap:.2e} "
          f"({rel:.2e} of a leaf's largest)")


if __name__ == "__main__":
    main_f64(__file__, lm1b, NAME, lm1b_f64)
