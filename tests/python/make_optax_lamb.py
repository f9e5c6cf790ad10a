"""Optax traces of `lamb` for tests/optim_lamb.rs.

Writes tests/fixtures/optax_lamb.json: for every case, the initial
parameters, the gradient fed at each of 12 steps (fixed, so a trace checks
the optimizer alone) and the parameters after each step. Parameter tree: a
flat dict keyed by checkpoint names, with shapes that hold no power of two:
conv_0.weight (3x2x3x3), conv_0.bias (3), dense_0.weight (5x7),
dense_0.bias (5), layer_norm_0.scale (7). conv_0.bias starts at zero and
dense_0.bias gets a zero gradient at the first step, so that both zero-norm
branches of Optax's trust ratio are taken.

Each case runs in float32 (`jax_enable_x64` off) and, as `_f64`, in
float64 with `jax_enable_x64` on, in separate processes (x64 is a
process-wide JAX switch).

Generated with Python 3, jax 0.10.2, jaxlib 0.10.2, optax 0.2.8, numpy
(see requirements.txt): `python tests/python/make_optax_lamb.py`.
"""

import json
import os
import subprocess
import sys

STEPS = 12
SHAPES = {
    "conv_0.weight": (3, 2, 3, 3),
    "conv_0.bias": (3,),
    "dense_0.weight": (5, 7),
    "dense_0.bias": (5,),
    "layer_norm_0.scale": (7,),
}


def decay_key(key):
    """flaxen's `decay_mask`: false for biases and norm scales/offsets."""
    return key.rsplit(".", 1)[-1] not in ("bias", "scale", "gamma", "beta")


def decay_mask(params):
    return {k: decay_key(k) for k in params}


def cases(optax):
    """Name -> Optax transformation; names are matched in the Rust test."""
    cosine = optax.cosine_decay_schedule(0.3, decay_steps=12)
    return {
        "lamb_lr0.3": optax.lamb(0.3),
        "lamb_lr1e-3_wd1e-2": optax.lamb(1e-3, weight_decay=1e-2),
        "lamb_lr0.3_wd1e-1_mask": optax.lamb(0.3, weight_decay=1e-1, mask=decay_mask),
        "lamb_cosine0.3_b1_0.8_b2_0.99_eps1e-8_eps_root1e-8_wd1e-2": optax.lamb(
            cosine, b1=0.8, b2=0.99, eps=1e-8, eps_root=1e-8, weight_decay=1e-2
        ),
        "masked_adw1e-2_then_lamb1e-3": optax.chain(
            optax.masked(optax.add_decayed_weights(1e-2), decay_mask), optax.lamb(1e-3)
        ),
    }


def arr(x):
    x = x.__array__()
    return {"shape": list(x.shape), "data": [float(v) for v in x.reshape(-1)]}


def run(dtype_name):
    import jax.numpy as jnp
    import numpy as np
    import optax

    dtype = {"f32": jnp.float32, "f64": jnp.float64}[dtype_name]
    out = []
    for i, (name, tx) in enumerate(cases(optax).items()):
        rng = np.random.default_rng(3000 + i)
        params = {k: jnp.asarray(rng.normal(size=s), dtype) for k, s in SHAPES.items()}
        # A zero parameter norm at the first step (trust ratio 1).
        params["conv_0.bias"] = jnp.zeros_like(params["conv_0.bias"])
        init = {k: arr(v) for k, v in params.items()}
        state = tx.init(params)
        grads_seq, after = [], []
        for step in range(STEPS):
            # Mixed magnitudes, and an exact zero in each bias.
            scale = 10.0 ** rng.integers(-3, 2, size=1)[0]
            grads = {
                k: jnp.asarray(rng.normal(size=s) * scale, dtype) for k, s in SHAPES.items()
            }
            grads["conv_0.bias"] = grads["conv_0.bias"].at[step % 3].set(0)
            grads["dense_0.bias"] = grads["dense_0.bias"].at[step % 5].set(0)
            if step == 0:
                # A zero update norm where nothing decays it (trust ratio 1).
                grads["dense_0.bias"] = jnp.zeros_like(grads["dense_0.bias"])
            updates, state = tx.update(grads, state, params)
            params = optax.apply_updates(params, updates)
            grads_seq.append({k: arr(v) for k, v in grads.items()})
            after.append({k: arr(v) for k, v in params.items()})
        suffix = "" if dtype_name == "f32" else "_f64"
        out.append(
            {
                "name": name + suffix,
                "dtype": dtype_name,
                "init": init,
                "grads": grads_seq,
                "params_after_each_step": after,
            }
        )
    return out


def main():
    if len(sys.argv) == 2:
        if sys.argv[1] == "f64":
            import jax

            jax.config.update("jax_enable_x64", True)
        json.dump(run(sys.argv[1]), sys.stdout)
        return
    import jax
    import optax

    all_cases = []
    for dt in ["f32", "f64"]:
        res = subprocess.run(
            [sys.executable, __file__, dt], check=True, capture_output=True, text=True
        )
        all_cases += json.loads(res.stdout)
    about = (
        f"Parameters after each optimizer step, from optax {optax.__version__} "
        f"(jax {jax.__version__}); see tests/python/make_optax_lamb.py. "
        "Param tree: conv_0.weight (3x2x3x3), conv_0.bias (3), dense_0.weight (5x7), "
        "dense_0.bias (5), layer_norm_0.scale (7). f32 cases ran with "
        "jax_enable_x64 off, _f64 cases with it on."
    )
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "fixtures", "optax_lamb.json")
    with open(path, "w") as f:
        json.dump({"about": about, "cases": all_cases}, f)
        f.write("\n")
    print(f"wrote {len(all_cases)} cases to {path}")


if __name__ == "__main__":
    main()
