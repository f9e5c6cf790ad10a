"""Optax traces of the basic optimizers for tests/optim_optax.rs (Cpu) and
tests/cuda_optim.rs (Cuda), through `every_optax_trace` in
tests/common/mod.rs.

Writes tests/fixtures/optax_traces.json: for every case, the initial
parameters, the gradient fed at each of 12 steps (fixed, not recomputed from
the parameters, so a trace checks the optimizer alone) and the parameters
after each step. Parameter tree: w (3x4), b (4). Everything is float32
(`jax_enable_x64` off), as a Flax user trains.

Generated with Python 3, jax 0.10.2, jaxlib 0.10.2, optax 0.2.8, numpy
(see requirements.txt): `python tests/python/make_optax_traces.py [OUTDIR]`.
"""

import jax
import jax.numpy as jnp
import optax

from fixture_out import normal, write
from flax_keys import arr

jax.config.update("jax_enable_x64", False)

STEPS = 12


def cases():
    """Name -> Optax transformation; names are matched in the Rust test."""
    return {
        "sgd_lr0.1": optax.sgd(0.1),
        "sgd_lr0.1_momentum0.9": optax.sgd(0.1, momentum=0.9),
        "sgd_lr0.1_nesterov0.9": optax.sgd(0.1, momentum=0.9, nesterov=True),
        "adam_lr1e-3": optax.adam(1e-3),
        "adamw_lr1e-3_wd1e-2": optax.adamw(1e-3, weight_decay=1e-2),
        "rmsprop_lr1e-2": optax.rmsprop(1e-2),
        "chain_clip1.0_adamw_cosine1e-3_10steps": optax.chain(
            optax.clip_by_global_norm(1.0),
            optax.adamw(optax.cosine_decay_schedule(1e-3, decay_steps=10), weight_decay=1e-4),
        ),
        "multisteps5_adam_lr1e-2": optax.MultiSteps(optax.adam(1e-2), every_k_schedule=5),
    }


def trace(name, tx, seed):
    """`tx` run STEPS steps; the inputs of case `seed` come from seeds
    seed, seed + 1 (init), seed + 10 + i and seed + 100 + i (grads of step i)."""
    init = {"w": normal(seed, (3, 4)), "b": normal(seed + 1, (4,))}
    params = {k: jnp.asarray(v) for k, v in init.items()}
    grads_seq = [
        {
            "w": jnp.asarray(normal(seed + 10 + i, (3, 4), 2.0)),
            "b": jnp.asarray(normal(seed + 100 + i, (4,), 2.0)),
        }
        for i in range(STEPS)
    ]
    state = tx.init(params)
    after = []
    for grads in grads_seq:
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        after.append({k: arr(v) for k, v in params.items()})
    return {
        "name": name,
        "init": {k: arr(v) for k, v in init.items()},
        "grads": [{k: arr(v) for k, v in g.items()} for g in grads_seq],
        "params_after_each_step": after,
    }


about = (
    "Parameters after each optimizer step, from optax %s. Param tree: w (3x4), b (4). "
    "Names describe the optax call: e.g. chain_clip1.0_adamw_cosine1e-3_10steps = "
    "optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(optax.cosine_decay_schedule(1e-3, "
    "decay_steps=10), weight_decay=1e-4)); multisteps5 = optax.MultiSteps(every_k_schedule=5)."
    % optax.__version__
)
out = [trace(name, tx, 1000 * i) for i, (name, tx) in enumerate(cases().items())]
write("optax_traces.json", {"about": about, "cases": out})
