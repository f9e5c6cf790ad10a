"""Optax traces of `adafactor` for tests/optim_adafactor.rs.

Writes tests/fixtures/optax_adafactor.json: for every case, the initial
parameters, the gradient fed at each of 12 steps (fixed, so a trace checks
the optimizer alone) and the parameters after each step. Parameter tree: a
flat dict keyed by checkpoint names, with shapes that hold no power of two:
conv_0.weight (3x2x3x3), conv_0.bias (3), dense_0.weight (5x7),
dense_0.bias (5), layer_norm_0.scale (7), dense_1.weight (7x3; its largest
dimension comes first, unlike dense_0.weight's and conv_0.weight's).
conv_0.bias starts at zero (its parameter scale is the 1e-3 floor) and
dense_0.bias gets a zero gradient at the first step.

Each case runs in float32 (`jax_enable_x64` off) and, as `_f64`, in
float64 with `jax_enable_x64` on, in separate processes (x64 is a
process-wide JAX switch).

Generated with Python 3, jax 0.10.2, jaxlib 0.10.2, optax 0.2.8, numpy
(see requirements.txt): `python tests/python/make_optax_adafactor.py`.
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
    "dense_1.weight": (7, 3),
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
        "adafactor_lr0.3": optax.adafactor(0.3),
        "adafactor_lr1e-2_min_dim3": optax.adafactor(1e-2, min_dim_size_to_factor=3),
        "adafactor_cosine0.3_min_dim2_decay0.5_noclip_noscale": optax.adafactor(
            cosine,
            min_dim_size_to_factor=2,
            decay_rate=0.5,
            clipping_threshold=None,
            multiply_by_parameter_scale=False,
        ),
        "adafactor_lr1e-3_min_dim3_clip0.5_eps1e-20": optax.adafactor(
            1e-3, min_dim_size_to_factor=3, clipping_threshold=0.5, eps=1e-20
        ),
        "adafactor_lr1e-2_min_dim2_unfactored": optax.adafactor(
            1e-2, min_dim_size_to_factor=2, factored=False
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
        rng = np.random.default_rng(4000 + i)
        params = {k: jnp.asarray(rng.normal(size=s), dtype) for k, s in SHAPES.items()}
        # A zero parameter: the parameter scale's 1e-3 floor.
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
                # A zero update.
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
        f"(jax {jax.__version__}); see tests/python/make_optax_adafactor.py. "
        "Param tree: conv_0.weight (3x2x3x3), conv_0.bias (3), dense_0.weight (5x7), "
        "dense_0.bias (5), layer_norm_0.scale (7), dense_1.weight (7x3). f32 cases ran with "
        "jax_enable_x64 off, _f64 cases with it on."
    )
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "fixtures", "optax_adafactor.json")
    with open(path, "w") as f:
        json.dump({"about": about, "cases": all_cases}, f)
        f.write("\n")
    print(f"wrote {len(all_cases)} cases to {path}")


if __name__ == "__main__":
    main()
