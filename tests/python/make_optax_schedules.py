"""Optax learning-rate schedules for tests/optim_schedules.rs.

Writes tests/fixtures/optax_schedules.json: each schedule's value at steps
0..=120, in float32 (`jax_enable_x64` off), keyed by the Optax call that
made it (the Rust test matches the keys).

Generated with Python 3, jax 0.10.2, jaxlib 0.10.2, optax 0.2.8, numpy
(see requirements.txt): `python tests/python/make_optax_schedules.py [OUTDIR]`.
"""

import jax
import optax

from fixture_out import write

jax.config.update("jax_enable_x64", False)

STEPS = 121

schedules = {
    "cosine_decay_schedule(init_value=1e-3, decay_steps=100, alpha=0.0)": optax.cosine_decay_schedule(
        1e-3, 100
    ),
    "cosine_decay_schedule(init_value=1e-3, decay_steps=100, alpha=0.1)": optax.cosine_decay_schedule(
        1e-3, 100, alpha=0.1
    ),
    "warmup_cosine_decay_schedule(init_value=0.0, peak_value=1e-3, warmup_steps=10, "
    "decay_steps=100, end_value=1e-5)": optax.warmup_cosine_decay_schedule(
        0.0, 1e-3, 10, 100, 1e-5
    ),
    "exponential_decay(init_value=1e-2, transition_steps=10, decay_rate=0.5)": optax.exponential_decay(
        1e-2, 10, 0.5
    ),
    "exponential_decay(init_value=1e-2, transition_steps=10, decay_rate=0.5, staircase=True)": (
        optax.exponential_decay(1e-2, 10, 0.5, staircase=True)
    ),
    "linear_schedule(init_value=1e-3, end_value=0.0, transition_steps=50)": optax.linear_schedule(
        1e-3, 0.0, 50
    ),
    "piecewise_constant_schedule(init_value=0.1, boundaries_and_scales={30: 0.1, 60: 0.1})": (
        optax.piecewise_constant_schedule(0.1, {30: 0.1, 60: 0.1})
    ),
}

write(
    "optax_schedules.json",
    {
        "about": "Learning rate at steps 0..=120 from optax %s." % optax.__version__,
        "schedules": {k: [float(f(i)) for i in range(STEPS)] for k, f in schedules.items()},
    },
)
