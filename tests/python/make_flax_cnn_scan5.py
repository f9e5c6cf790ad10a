"""Five Adam steps of a small Flax CNN under `jax.lax.scan`, for
tests/scan_flax.rs (Cpu), tests/cuda_scan.rs (Cuda), through
tests/common/flax_cnn.rs, and tests/compact_cnn.rs.

Writes tests/fixtures/flax_cnn_scan5.json: the network (Conv 8 3x3 SAME,
relu, avg_pool 2/2, Conv 16 3x3 SAME, relu, avg_pool 2/2, flatten, Dense 32,
relu, Dense 10) initialised by Flax from `PRNGKey(0)` on 1x8x8 inputs, 5
stacked batches of 4 images with integer labels, the loss of each step
(`optax.adam(1e-3)`, softmax cross-entropy) and the parameters before and
after. Everything is float32 (`jax_enable_x64` off).

Layout is flaxen's: images NCHW, conv kernels OIHW, Dense kernels
(out, in). Flax flattens its NHWC feature map in (h, w, c) order and flaxen
in (c, h, w) order, so the first Dense kernel's rows are re-ordered to
match; the two networks then compute the same function.

Generated with Python 3, jax 0.10.2, jaxlib 0.10.2, flax 0.12.8, optax
0.2.8, numpy (see requirements.txt):
`python tests/python/make_flax_cnn_scan5.py [OUTDIR]`.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fixture_out import normal, write
from flax_keys import arr

jax.config.update("jax_enable_x64", False)

SEED = 0
K_STEPS = 5
BATCH = 4
HW = 8
C1 = 16  # channels of the last feature map


class SeedCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(features=8, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = nn.Conv(features=C1, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.Dense(features=32)(x)
        x = nn.relu(x)
        return nn.Dense(features=10)(x)


def nchw_dense(kernel, s, c):
    """The rows of `kernel` are indexed by Flax's (h, w, c) flatten;
    re-index them by flaxen's (c, h, w) flatten."""
    k = np.asarray(kernel).reshape(s, s, c, -1)
    return np.transpose(k, (2, 0, 1, 3)).reshape(s * s * c, -1)


def export(p):
    """Flax's parameters under the fixture's names, in flaxen's layouts."""
    oihw = (3, 2, 0, 1)
    return {
        "conv0.weight_oihw": arr(jnp.transpose(p["Conv_0"]["kernel"], oihw)),
        "conv0.bias": arr(p["Conv_0"]["bias"]),
        "conv1.weight_oihw": arr(jnp.transpose(p["Conv_1"]["kernel"], oihw)),
        "conv1.bias": arr(p["Conv_1"]["bias"]),
        "dense0.weight_out_in": arr(nchw_dense(p["Dense_0"]["kernel"], HW // 4, C1).T),
        "dense0.bias": arr(p["Dense_0"]["bias"]),
        "dense1.weight_out_in": arr(p["Dense_1"]["kernel"].T),
        "dense1.bias": arr(p["Dense_1"]["bias"]),
    }


model = SeedCNN()
params = model.init(jax.random.PRNGKey(SEED), jnp.zeros((1, HW, HW, 1)))["params"]
xs = normal(SEED + 7, (K_STEPS, BATCH, 1, HW, HW))
ys = np.random.default_rng(SEED + 8).integers(0, 10, (K_STEPS, BATCH))
tx = optax.adam(1e-3)


def loss_fn(p, x, y):
    logits = model.apply({"params": p}, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def step(carry, batch):
    p, s = carry
    x, y = batch
    loss, g = jax.value_and_grad(loss_fn)(p, jnp.transpose(x, (0, 2, 3, 1)), y)
    u, s = tx.update(g, s, p)
    return (optax.apply_updates(p, u), s), loss


(final, _), losses = jax.lax.scan(step, (params, tx.init(params)), (jnp.asarray(xs), jnp.asarray(ys)))

about = (
    "Seed-style CNN (Conv 8 3x3 SAME, relu, avg_pool 2/2, Conv 16 3x3 SAME, relu, avg_pool 2/2, "
    "flatten, Dense 32, relu, Dense 10), optax.adam(1e-3), softmax cross-entropy with integer labels, "
    "jax.lax.scan over %d stacked batches. Inputs NCHW. Flatten is NCHW order (weights re-ordered "
    "to match)." % K_STEPS
)
write(
    "flax_cnn_scan5.json",
    {
        "about": about,
        "k_steps": K_STEPS,
        "batch": BATCH,
        "hw": HW,
        "init_params": export(params),
        "xs": arr(xs),
        "labels": [[int(v) for v in row] for row in ys],
        "losses": [float(v) for v in losses],
        "final_params": export(final),
    },
)
