"""Optax traces of `masked`, `adamw(mask=...)`, `multi_transform` and
`adabelief` for tests/optim_masked.rs.

Writes tests/fixtures/optax_masked.json: for every case, the initial
parameters, the gradient fed at each of 12 steps (fixed, so a trace checks
the optimizer alone) and the parameters after each step. Parameter tree: a
flat dict keyed by checkpoint names, with shapes that hold no power of two:
conv_0.weight (3x2x3x3), conv_0.bias (3), dense_0.weight (5x7),
dense_0.bias (5), layer_norm_0.scale (7).

Each case runs in float32 (`jax_enable_x64` off) and, as `_f64`, in
float64 with `jax_enable_x64` on, in separate processes (x64 is a
process-wide JAX switch).

Generated with Python 3, jax 0.10.2, jaxlib 0.10.2, optax 0.2.8, numpy
(see requirements.txt): `python tests/python/make_optax_masked.py [OUTDIR]`.
"""

from optax_trace import BIAS_ZEROS, FIVE_LEAVES, decay_key, decay_mask, describe, main, run_tree

SHAPES = FIVE_LEAVES


def label_of(key):
    """The labels of the multi_transform cases."""
    if key.startswith("layer_norm_0."):
        return "frozen"
    if key.startswith("dense_0."):
        return "head"
    return "body"


def labels(params):
    return {k: label_of(k) for k in params}


def cases(optax):
    """Name -> Optax transformation; names are matched in the Rust test."""
    cosine = optax.cosine_decay_schedule(0.3, decay_steps=12)
    return {
        "masked_adw1e-2_then_adam0.3": optax.chain(
            optax.masked(optax.add_decayed_weights(1e-2), decay_mask), optax.adam(0.3)
        ),
        "masked_adw1e-1_then_adam1e-3": optax.chain(
            optax.masked(optax.add_decayed_weights(1e-1), decay_mask), optax.adam(1e-3)
        ),
        "masked_adam_cosine0.3_alone": optax.masked(optax.adam(cosine), decay_mask),
        "masked_sgd1e-3_momentum0.9_biases": optax.masked(
            optax.sgd(1e-3, momentum=0.9),
            lambda p: {k: not decay_key(k) for k in p},
        ),
        "adamw_lr0.3_wd1e-2_mask": optax.adamw(0.3, weight_decay=1e-2, mask=decay_mask),
        "adamw_cosine0.3_wd1e-1_b1_0.8_b2_0.99_eps1e-6_mask": optax.adamw(
            cosine, b1=0.8, b2=0.99, eps=1e-6, weight_decay=1e-1, mask=decay_mask
        ),
        "adamw_lr1e-3_wd1e-1_mask": optax.adamw(1e-3, weight_decay=1e-1, mask=decay_mask),
        "multi_frozen_head_adam1e-3_body_sgd1e-2": optax.multi_transform(
            {
                "frozen": optax.set_to_zero(),
                "head": optax.adam(1e-3),
                "body": optax.sgd(1e-2),
            },
            labels,
        ),
        "multi_frozen_adam_cosine0.3_head_clip0.5_sgd0.3_momentum0.9_body": (
            optax.multi_transform(
                {
                    "frozen": optax.adam(cosine),
                    "head": optax.chain(
                        optax.clip_by_global_norm(0.5), optax.sgd(0.3, momentum=0.9)
                    ),
                    "body": optax.adamw(1e-3, weight_decay=1e-1, mask=decay_mask),
                },
                labels,
            )
        ),
        "adabelief_lr0.3": optax.adabelief(0.3),
        "adabelief_cosine0.3_b1_0.8_b2_0.99_eps1e-8_eps_root0_nesterov": optax.adabelief(
            cosine, b1=0.8, b2=0.99, eps=1e-8, eps_root=0.0, nesterov=True
        ),
        "masked_adw1e-2_then_adabelief1e-3_eps_root1e-8": optax.chain(
            optax.masked(optax.add_decayed_weights(1e-2), decay_mask),
            optax.adabelief(1e-3, eps_root=1e-8),
        ),
    }


def run(dtype_name):
    import optax

    return run_tree(cases(optax), SHAPES, 2000, dtype_name, BIAS_ZEROS)


if __name__ == "__main__":
    main(__file__, "optax_masked.json", run, describe(SHAPES))
