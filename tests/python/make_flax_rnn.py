"""Writes tests/fixtures/flax_rnn.json: Flax linen `nn.RNN` over
`LSTMCell`, `GRUCell` and `SimpleCell` (with `reverse`, `keep_order` and
`return_carry`), forward values and gradients, in float64, for
tests/layers_rnn.rs.

    pip install -r tests/python/requirements.txt   # jax 0.10.2, flax 0.12.8
    python3 tests/python/make_flax_rnn.py > tests/fixtures/flax_rnn.json

Inputs are `[batch, seq, features]`. The kernels keep Flax's initialisers
(lecun_normal for the input ones, orthogonal for the recurrent ones); the
biases, zeros at init, are drawn at random so that their paths count.

Keys are flaxen's, relative to the RNN (the field `lstm_cell_0` of a
model adds its prefix): Flax's `LSTMCell_0/ii/kernel` (in, out) is
`ii.weight` (out, in), its `bias` is `ii.bias`. With `return_carry`, Flax
returns `(carry, outputs)`; flaxen returns the carry's hidden state `h`
(`carry[1]` of an LSTM's `(c, h)`), which is what `y` holds here.
loss = sum(y * r); grad_* are d loss / d *.
"""

import json

import jax

jax.config.update("jax_enable_x64", True)

import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(20261212)

CELLS = {"LSTMCell": nn.LSTMCell, "GRUCell": nn.GRUCell, "SimpleCell": nn.SimpleCell}

# (cell, in features, features, seq, batch, reverse, keep_order, return_carry):
# odd sizes, every option on every cell at least once.
CASES = [
    ("LSTMCell", 3, 5, 7, 2, False, False, False),
    ("LSTMCell", 3, 5, 7, 2, True, False, False),
    ("LSTMCell", 4, 3, 5, 3, True, True, False),
    ("LSTMCell", 3, 5, 7, 2, False, False, True),
    ("LSTMCell", 5, 3, 3, 1, True, False, True),
    ("GRUCell", 4, 3, 5, 3, False, False, False),
    ("GRUCell", 3, 5, 4, 2, True, True, False),
    ("GRUCell", 4, 3, 5, 3, False, False, True),
    ("SimpleCell", 5, 7, 3, 2, False, False, False),
    ("SimpleCell", 3, 4, 5, 2, True, False, False),
    ("SimpleCell", 5, 7, 3, 2, True, True, True),
]


def arr(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": [float(v) for v in a.reshape(-1)]}


class Model(nn.Module):
    cell: str
    features: int
    reverse: bool
    keep_order: bool
    return_carry: bool

    @nn.compact
    def __call__(self, x):
        cell = CELLS[self.cell](features=self.features, param_dtype=jnp.float64)
        out = nn.RNN(
            cell,
            reverse=self.reverse,
            keep_order=self.keep_order,
            return_carry=self.return_carry,
        )(x)
        if not self.return_carry:
            return out
        carry, _ = out
        return carry[1] if self.cell == "LSTMCell" else carry


def flat(tree, prefix=""):
    """{'ii': {'kernel': k}} -> {'ii/kernel': k}"""
    out = {}
    for k, v in tree.items():
        path = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flat(v, path))
        else:
            out[path] = v
    return out


def key_of(path):
    """'ii/kernel' -> 'ii.weight'"""
    layer, leaf = path.split("/")
    return f"{layer}.{'weight' if leaf == 'kernel' else leaf}"


def flaxen(a, path):
    """Flax's (in, out) kernel as flaxen's (out, in) weight."""
    return np.asarray(a).T if path.endswith("kernel") else np.asarray(a)


def case(cell, i, h, s, b, reverse, keep_order, return_carry):
    model = Model(cell, h, reverse, keep_order, return_carry)
    x = rng.standard_normal((b, s, i))
    params = model.init(jax.random.key(int(rng.integers(1 << 30))), jnp.asarray(x))["params"]
    (name,) = params.keys()  # the cell, e.g. LSTMCell_0: RNN has no parameters
    params = jax.tree_util.tree_map_with_path(
        lambda p, v: (
            jnp.asarray(rng.standard_normal(v.shape) * 0.5)
            if p[-1].key == "bias"
            else jnp.asarray(v, jnp.float64)
        ),
        params,
    )
    y0 = model.apply({"params": params}, jnp.asarray(x))
    r = rng.standard_normal(y0.shape)

    def loss(x, p):
        y = model.apply({"params": p}, x)
        return jnp.sum(y * r), y

    (_, y), (gx, gp) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        jnp.asarray(x), params
    )
    ps, gs = flat(params[name]), flat(gp[name])
    return {
        "layer": (
            f"RNN({cell}(features={h}), reverse={reverse}, keep_order={keep_order},"
            f" return_carry={return_carry})"
        ),
        "cell": cell,
        "features": h,
        "reverse": reverse,
        "keep_order": keep_order,
        "return_carry": return_carry,
        "x": arr(x),
        "r": arr(r),
        "params": {key_of(p): arr(flaxen(v, p)) for p, v in ps.items()},
        "flax_paths": {key_of(p): f"{name}/{p}" for p in ps},
        "num_params": int(sum(np.size(v) for v in ps.values())),
        "y": arr(y),
        "grad_x": arr(gx),
        "grads": {key_of(p): arr(flaxen(v, p)) for p, v in gs.items()},
    }


def main():
    out = {
        "jax": jax.__version__,
        "flax": __import__("flax").__version__,
        "cases": [case(*c) for c in CASES],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
