"""Optax traces at large learning rates for tests/optim_optax_exact.rs.

Writes tests/fixtures/optax_exact.json: for every case, the initial
parameters, the gradient fed at each of 12 steps (fixed, not recomputed from
the parameters, so a trace checks the optimizer alone) and the parameters
after each step. Parameter tree: w (5x3), b (7), shapes with no power of two.

Each case runs in float32 (JAX's default, `jax_enable_x64` off: Optax's
constants `1 - b` come from Python doubles rounded to f32 and its bias
corrections `1 - b**t` are computed in f32) and, for the `_f64` cases, in
float64 with `jax_enable_x64` on. The two precisions run in separate
processes because x64 is a process-wide JAX switch.

Generated with Python 3, jax 0.10.2, jaxlib 0.10.2, optax 0.2.8, numpy
(see requirements.txt): `python tests/python/make_optax_exact.py [OUTDIR]`.
"""

from optax_trace import main, run_tree


def cases(optax):
    """Name -> Optax transformation; names are matched in the Rust test."""
    return {
        "adam_lr5e-2": optax.adam(5e-2),
        "adam_lr1e-3_b1_0.8_b2_0.99_eps1e-6": optax.adam(1e-3, b1=0.8, b2=0.99, eps=1e-6),
        "adam_lr0.3": optax.adam(0.3),
        "adamw_lr5e-2_wd1e-2": optax.adamw(5e-2, weight_decay=1e-2),
        "adamw_cosine5e-2_12steps_wd1e-4": optax.adamw(
            optax.cosine_decay_schedule(5e-2, decay_steps=12), weight_decay=1e-4
        ),
        "chain_clip0.5_adam2e-2": optax.chain(
            optax.clip_by_global_norm(0.5), optax.adam(2e-2)
        ),
        "rmsprop_lr3e-2": optax.rmsprop(3e-2),
        "rmsprop_lr1e-2_centered": optax.rmsprop(1e-2, centered=True),
        "rmsprop_lr5e-2_momentum0.9": optax.rmsprop(5e-2, momentum=0.9),
        "rmsprop_lr5e-2_momentum0.9_nesterov": optax.rmsprop(
            5e-2, momentum=0.9, nesterov=True
        ),
        "rmsprop_cosine5e-2_12steps_decay0.95_eps1e-6_centered_momentum0.5_nesterov": (
            optax.rmsprop(
                optax.cosine_decay_schedule(5e-2, decay_steps=12),
                decay=0.95,
                eps=1e-6,
                centered=True,
                momentum=0.5,
                nesterov=True,
            )
        ),
        "apply_if_finite_adam5e-2_max2": optax.apply_if_finite(optax.adam(5e-2), 2),
        "apply_if_finite_adamw_cosine5e-2_12steps_wd1e-4_max1": optax.apply_if_finite(
            optax.adamw(optax.cosine_decay_schedule(5e-2, decay_steps=12), weight_decay=1e-4),
            1,
        ),
        "adagrad_lr5e-2": optax.adagrad(5e-2),
        "adagrad_cosine1e-1_12steps_init0_eps1e-10": optax.adagrad(
            optax.cosine_decay_schedule(1e-1, decay_steps=12),
            initial_accumulator_value=0.0,
            eps=1e-10,
        ),
        "lion_lr1e-2": optax.lion(1e-2),
        "lion_cosine3e-2_12steps_b1_0.95_b2_0.98_wd1e-2": optax.lion(
            optax.cosine_decay_schedule(3e-2, decay_steps=12), b1=0.95, b2=0.98, weight_decay=1e-2
        ),
    }


# Non-finite gradient entries: case -> {step (0-based): (leaf, flat index,
# value)}. They stay out of the JSON arrays (JSON has no NaN); the Rust test
# writes them into the gradients from the case's "poison" list.
POISON = {
    "apply_if_finite_adam5e-2_max2": {
        2: ("w", 4, "nan"),
        5: ("b", 1, "inf"),
        6: ("w", 0, "-inf"),
    },
    "apply_if_finite_adamw_cosine5e-2_12steps_wd1e-4_max1": {
        3: ("b", 6, "-inf"),
        8: ("w", 14, "nan"),
    },
}


def run(dtype_name):
    import optax

    return run_tree(
        cases(optax), {"w": (5, 3), "b": (7,)}, 1000, dtype_name, zeros={"b": 7}, poison=POISON
    )


if __name__ == "__main__":
    main(__file__, "optax_exact.json", run, "w (5x3), b (7)")
