"""Writes tests/fixtures/flax_attention.json: Flax linen models with token
ids, masks and several inputs, as a Flax user writes them, for
tests/compact_attention_flax.rs:

- `classifier`: Embed, a padding mask from the token ids
  (`make_attention_mask(tokens > 0, tokens > 0)`), masked SelfAttention,
  LayerNorm and a Dense head on the first (CLS) token;
- `decoder`: a causal SelfAttention (`make_causal_mask`), cross-attention
  (MultiHeadDotProductAttention) to a second input under a mask given as a
  third input, and a Dense head on the last position.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -r tests/python/requirements.txt
    /tmp/venv/bin/python tests/python/make_flax_attention.py > tests/fixtures/flax_attention.json

float64; parameters random (not Flax's init) so that nothing is trivially
0 or 1; deterministic attention (no dropout). Tensors in flaxen's layout
under flaxen's checkpoint keys (see flax_keys.py). loss = sum(y * r).
"""

import json

import jax

jax.config.update("jax_enable_x64", True)

import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax_keys import arr, by_key, count, flat, kind, paths, unflat  # noqa: E402

rng = np.random.default_rng(20261201)


def normal(*shape, scale=1.0, shift=0.0):
    return np.round(rng.standard_normal(shape) * scale + shift, 6)


class Classifier(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        mask = nn.make_attention_mask(tokens > 0, tokens > 0)
        x = nn.Embed(num_embeddings=50, features=16)(tokens)
        x = nn.SelfAttention(num_heads=2, qkv_features=16)(x, mask=mask)
        x = nn.LayerNorm()(x)
        return nn.Dense(3)(x[:, 0])


class Decoder(nn.Module):
    @nn.compact
    def __call__(self, x, memory, mask):
        y = nn.SelfAttention(num_heads=2)(x, mask=nn.make_causal_mask(x[..., 0]))
        x = x + y
        y = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=10, out_features=8)(
            x, memory, mask=mask[:, None]
        )
        x = x + y
        return nn.Dense(4)(x[:, -1])


def random_params(params):
    out = {}
    for path, v in flat(params).items():
        owner, leaf = kind(path[-2]), path[-1]
        shape = v.shape
        if leaf == "kernel":
            fan_in = shape[0] if owner in ("query", "key", "value") else int(np.prod(shape[:-1]))
            out[path] = normal(*shape, scale=1.15 / np.sqrt(fan_in))
        elif leaf == "embedding":
            out[path] = normal(*shape, scale=0.8)
        elif leaf == "scale":
            out[path] = normal(*shape, scale=0.3, shift=1.0)
        elif leaf == "bias":
            out[path] = normal(*shape, scale=0.3)
        else:
            raise ValueError(path)
    return unflat({p: jnp.asarray(v) for p, v in out.items()})


def case(model, label, inputs, grad_inputs):
    """y and the gradients of `loss` w.r.t. the parameters and the float
    inputs numbered in `grad_inputs`."""
    params = random_params(model.init(jax.random.PRNGKey(0), *inputs)["params"])
    r = normal(*model.apply({"params": params}, *inputs).shape)

    def loss(p, *xs):
        y = model.apply({"params": p}, *xs)
        return jnp.sum(y * r), y

    argnums = (0,) + tuple(1 + k for k in grad_inputs)
    (_, y), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(params, *inputs)
    return {
        "model": label,
        "inputs": [arr(np.asarray(x, dtype=np.float64)) for x in inputs],
        "r": arr(r),
        "params": by_key(flat(params)),
        "flax_paths": paths(params),
        "num_params": count(params),
        "y": arr(y),
        "grad_inputs": [arr(g) for g in grads[1:]],
        "grads": by_key(flat(grads[0])),
    }


# Padding at the end of each row, and one query position that is padding:
# it sees no key at all (uniform attention, as Flax's finfo.min logits).
tokens = np.array([[7, 3, 49, 12, 0, 0, 0], [1, 44, 2, 9, 30, 17, 0], [5, 0, 0, 0, 0, 0, 0]])
x = normal(3, 5, 8, scale=1.2, shift=0.1)
memory = normal(3, 6, 7, scale=0.9, shift=-0.2)
cross_mask = rng.uniform(size=(3, 5, 6)) > 0.35
cross_mask[:, :, 0] = True

out = {
    "about": (
        f"flax {flax.__version__} / jax {jax.__version__} linen models with token ids and masks, "
        "float64, made by tests/python/make_flax_attention.py. Tensors in flaxen's layout under "
        "flaxen's checkpoint keys (flax_paths maps them to Flax's). inputs are the model's inputs "
        "in order (token ids and masks as numbers); loss = sum(y * r); grad_inputs are d loss / d "
        "each float input."
    ),
    "classifier": case(Classifier(), "Classifier (Embed, padding mask, SelfAttention, CLS head)", [jnp.asarray(tokens)], []),
    "decoder": case(
        Decoder(),
        "Decoder (causal SelfAttention, masked cross-attention, last-position head)",
        [jnp.asarray(x), jnp.asarray(memory), jnp.asarray(cross_mask)],
        [0, 1],
    ),
}
print(json.dumps(out))
