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
(see requirements.txt): `python tests/python/make_optax_lamb.py [OUTDIR]`.
"""

from optax_trace import BIAS_ZEROS, FIVE_LEAVES, decay_mask, describe, main, run_tree

SHAPES = FIVE_LEAVES


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


def run(dtype_name):
    import optax

    return run_tree(cases(optax), SHAPES, 3000, dtype_name, BIAS_ZEROS, zero_norms=True)


if __name__ == "__main__":
    main(__file__, "optax_lamb.json", run, describe(SHAPES))
