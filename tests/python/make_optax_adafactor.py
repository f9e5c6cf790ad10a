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
(see requirements.txt): `python tests/python/make_optax_adafactor.py [OUTDIR]`.
"""

from optax_trace import BIAS_ZEROS, FIVE_LEAVES, describe, main, run_tree

SHAPES = dict(FIVE_LEAVES, **{"dense_1.weight": (7, 3)})


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


def run(dtype_name):
    import optax

    return run_tree(cases(optax), SHAPES, 4000, dtype_name, BIAS_ZEROS, zero_norms=True)


if __name__ == "__main__":
    main(__file__, "optax_adafactor.json", run, describe(SHAPES))
