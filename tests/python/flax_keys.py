"""Flax linen parameter paths to flaxen checkpoint keys and layouts, shared
by the fixture generators (`make_flax_compact_v2.py`,
`make_flax_attention.py`); arrays to and from a fixture's `{"shape",
"data"}` form (`arr`, `from_arr`); a Flax tree's leaves by their "/" paths
as `to_bytes` saves them (`leaves`, `by_path`).

Modules are snake-cased (`SelfAttention_0` -> `self_attention_0`); Conv
kernels HWIO -> OIHW `weight`; Dense kernels transposed to dfdx's `(out,
in)` `weight`; BatchNorm `mean`/`var` -> `running_mean`/`running_var`;
LayerNorm `scale`/`bias` -> dfdx's `gamma`/`beta`; attention `query`, `key`,
`value` kernels `(F, H, D)` -> `(H*D, F)`, `out` kernels `(H, D, O)` ->
`(O, H*D)`; Embed's `embedding` keeps its name and layout.

flax is imported inside `leaves`, so that importing this module imports no
jax (a float64 pass must set JAX_ENABLE_X64 first; fixture_out.py).
"""

import re

import numpy as np


def arr(a):
    """{"shape": [...], "data": [flat row-major floats]} of an array."""
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": [float(v) for v in a.reshape(-1)]}


def from_arr(a):
    """The float64 numpy array of an `arr` dict."""
    return np.asarray(a["data"], np.float64).reshape(a["shape"])


def leaves(tree):
    """{"/" path: leaf} of a Flax tree as `flax.serialization.to_bytes`
    saves it: through its state dict, so a boxed leaf
    (`nn.with_logical_partitioning`) has a path ending in "value"."""
    from flax.serialization import to_state_dict
    from flax.traverse_util import flatten_dict

    return flatten_dict(to_state_dict(tree), sep="/")


def by_path(tree, collection):
    """{"<collection>/<path>": arr} of a tree of that collection (a
    gradient tree: "params/Dense_0/kernel"), in sorted path order, paths as
    `leaves` gives them."""
    return {f"{collection}/{k}": arr(v) for k, v in sorted(leaves(tree).items())}


def snake(name):
    """`SelfAttention_0` -> `self_attention_0`, `LSTMCell_0` ->
    `lstm_cell_0`: a word starts at a capital after a lowercase letter or a
    digit, and at the last capital of an acronym before a lowercase letter,
    as flaxen's macro names fields."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def kind(module):
    """The class of an auto-named module (`BatchNorm_2` -> `BatchNorm`), or
    the module's own name (SelfAttention's `query`, ...)."""
    return re.sub(r"_\d+$", "", module)


def to_flaxen(path, value):
    """Flax path (a tuple of names) and value -> (flaxen key, value in
    flaxen's layout)."""
    *modules, leaf = path
    owner = kind(modules[-1])
    v = np.asarray(value)
    if owner == "Conv":
        new = {"kernel": ("weight", lambda a: np.transpose(a, (3, 2, 0, 1))), "bias": ("bias", None)}
    elif owner == "Dense":
        new = {"kernel": ("weight", np.transpose), "bias": ("bias", None)}
    elif owner == "BatchNorm":
        new = {"scale": ("scale", None), "bias": ("bias", None),
               "mean": ("running_mean", None), "var": ("running_var", None)}
    elif owner == "LayerNorm":
        new = {"scale": ("gamma", None), "bias": ("beta", None)}
    elif owner in ("query", "key", "value"):
        new = {"kernel": ("weight", lambda a: a.reshape(a.shape[0], -1).T),
               "bias": ("bias", lambda a: a.reshape(-1))}
    elif owner == "Embed":
        new = {"embedding": ("embedding", None)}
    elif owner == "out":
        new = {"kernel": ("weight", lambda a: a.reshape(-1, a.shape[-1]).T), "bias": ("bias", None)}
    else:
        raise ValueError(f"no flaxen mapping for {'/'.join(path)}")
    name, f = new[leaf]
    key = ".".join([snake(m) if kind(m) != m else m for m in modules] + [name])
    return key, (f(v) if f is not None else v)


def flat(tree, prefix=()):
    """{path tuple: leaf} of a nested dict."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) or hasattr(v, "items"):
            out.update(flat(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def unflat(leaves):
    tree = {}
    for path, v in leaves.items():
        node = tree
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = v
    return tree


def by_key(leaves):
    """{flaxen key: arr} of {Flax path: value}."""
    out = {}
    for path, v in leaves.items():
        key, a = to_flaxen(path, v)
        assert key not in out, key
        out[key] = arr(a)
    return out


def count(params):
    return int(sum(np.asarray(v).size for v in flat(params).values()))


def paths(*trees):
    out = {}
    for tree in trees:
        for path, v in flat(tree).items():
            out[to_flaxen(path, v)[0]] = "/".join(path)
    return out
