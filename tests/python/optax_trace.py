"""What the Optax trace generators share (make_optax_exact.py,
make_optax_lamb.py, make_optax_masked.py, make_optax_adafactor.py): the
12-step trace of every case on a tree keyed by checkpoint names, and the
run of each case in float32 and in float64.

`jax_enable_x64` is a process-wide JAX switch, so `main` runs the script
again once a precision (`--dtype f32`, `--dtype f64`), reads the cases it
prints, and writes the fixture to tests/fixtures/ or to the directory given
as the script's only argument.
"""

import json
import os
import subprocess
import sys

from fixture_out import FIXTURES

STEPS = 12

# The leaves of the trees keyed by checkpoint names, with shapes that hold
# no power of two.
FIVE_LEAVES = {
    "conv_0.weight": (3, 2, 3, 3),
    "conv_0.bias": (3,),
    "dense_0.weight": (5, 7),
    "dense_0.bias": (5,),
    "layer_norm_0.scale": (7,),
}


def describe(shapes):
    """`conv_0.weight (3x2x3x3), conv_0.bias (3), ...`, as the fixtures'
    `about` names their trees."""
    return ", ".join(f"{k} ({'x'.join(map(str, s))})" for k, s in shapes.items())


def decay_key(key):
    """flaxen's `decay_mask`: false for biases and norm scales/offsets."""
    return key.rsplit(".", 1)[-1] not in ("bias", "scale", "gamma", "beta")


def decay_mask(params):
    return {k: decay_key(k) for k in params}


def arr(x):
    x = x.__array__()
    return {"shape": list(x.shape), "data": [float(v) for v in x.reshape(-1)]}


# The biases of FIVE_LEAVES, and where their gradients hold an exact zero:
# at index `step % n`.
BIAS_ZEROS = {"conv_0.bias": 3, "dense_0.bias": 5}


def run_tree(cases, shapes, seed, dtype_name, zeros, zero_norms=False, poison=None):
    """Every case of `cases` (name -> Optax transformation) on a tree of
    `shapes`, `STEPS` steps of fixed gradients, in `dtype_name`. Case `i`
    draws from `default_rng(seed + i)`: the parameters, then each step's
    scale (mixed magnitudes: the moments see both tiny and large gradients)
    and gradients. `zeros`: leaf -> n, an exact zero at index `step % n` of
    that leaf's gradient. `zero_norms`: conv_0.bias starts at zero and
    dense_0.bias gets a zero gradient at the first step (zero parameter and
    update norms). `poison`: case -> {step: (leaf, flat index, value)},
    non-finite gradient entries fed to the optimizer but kept out of the
    recorded gradients (JSON has no NaN); each case then lists them under
    "poison", for the Rust test to write back."""
    import jax.numpy as jnp
    import numpy as np
    import optax

    dtype = {"f32": jnp.float32, "f64": jnp.float64}[dtype_name]
    out = []
    for i, (name, tx) in enumerate(cases.items()):
        rng = np.random.default_rng(seed + i)
        params = {k: jnp.asarray(rng.normal(size=s), dtype) for k, s in shapes.items()}
        if zero_norms:
            params["conv_0.bias"] = jnp.zeros_like(params["conv_0.bias"])
        init = {k: arr(v) for k, v in params.items()}
        state = tx.init(params)
        grads_seq, after = [], []
        for step in range(STEPS):
            scale = 10.0 ** rng.integers(-3, 2, size=1)[0]
            grads = {
                k: jnp.asarray(rng.normal(size=s) * scale, dtype) for k, s in shapes.items()
            }
            for k, n in zeros.items():
                grads[k] = grads[k].at[step % n].set(0)
            if zero_norms and step == 0:
                grads["dense_0.bias"] = jnp.zeros_like(grads["dense_0.bias"])
            fed = grads
            bad = (poison or {}).get(name, {}).get(step)
            if bad is not None:
                leaf, idx, value = bad
                flat = grads[leaf].reshape(-1).at[idx].set(float(value))
                fed = dict(grads, **{leaf: flat.reshape(grads[leaf].shape)})
            updates, state = tx.update(fed, state, params)
            params = optax.apply_updates(params, updates)
            grads_seq.append({k: arr(v) for k, v in grads.items()})
            after.append({k: arr(v) for k, v in params.items()})
        suffix = "" if dtype_name == "f32" else "_f64"
        case = {
            "name": name + suffix,
            "dtype": dtype_name,
            "init": init,
            "grads": grads_seq,
            "params_after_each_step": after,
        }
        if poison is not None:
            case["poison"] = [[st, *p] for st, p in sorted(poison.get(name, {}).items())]
        out.append(case)
    return out


def main(script, fixture, run, tree):
    """`run(dtype_name)` -> the cases in that precision; `tree` describes
    the parameter tree in the fixture's `about`."""
    if len(sys.argv) == 3 and sys.argv[1] == "--dtype":
        if sys.argv[2] == "f64":
            import jax

            jax.config.update("jax_enable_x64", True)
        json.dump(run(sys.argv[2]), sys.stdout)
        return
    import jax
    import optax

    all_cases = []
    for dt in ["f32", "f64"]:
        res = subprocess.run(
            [sys.executable, script, "--dtype", dt], check=True, capture_output=True, text=True
        )
        all_cases += json.loads(res.stdout)
    about = (
        f"Parameters after each optimizer step, from optax {optax.__version__} "
        f"(jax {jax.__version__}); see tests/python/{os.path.basename(script)}. "
        f"Param tree: {tree}. f32 cases ran with jax_enable_x64 off, "
        "_f64 cases with it on."
    )
    out = sys.argv[1] if len(sys.argv) > 1 else FIXTURES
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, fixture)
    with open(path, "w") as f:
        json.dump({"about": about, "cases": all_cases}, f)
        f.write("\n")
    print(f"wrote {len(all_cases)} cases to {path}")
