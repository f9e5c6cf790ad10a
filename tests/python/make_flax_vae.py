"""Writes the fixture of tests/flax_port_vae.rs: the variational
autoencoder of google/flax's examples/vae (an MLP encoder to a mean and a
log-variance, the reparameterisation, an MLP decoder to Bernoulli
logits), as a Flax checkpoint saved exactly as
`flax.serialization.to_bytes(variables)` returns it, with its outputs,
train.py's loss and its gradients in float32 and float64, and Flax's own
training curve on a small binary data set.

    /tmp/venv/bin/python tests/python/make_flax_vae.py [OUTDIR]

writes tests/fixtures/flax_port_vae.{msgpack,json}, or those files in
OUTDIR to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, optax 0.2.8, numpy 2.4.6, msgpack 1.2.4 made the
committed files (Python 3.11; requirements.txt). The float64 results come
from a second run of the script in a process of its own
(`fixture_out.main_f64`), since `jax_enable_x64` is process-wide. Two runs
into fresh directories gave byte-identical files.

The model is retyped here from two files of google/flax:

- examples/vae/models.py (read at commit
  28c97f50381005301dd4811797fcb55ccfacce69; at
  7e9bb7619d8da9d7b5d24e805e7e3e6a31551c75 it differs only by the
  `# pyrefly: ignore` comments): `Encoder`, `Decoder`, `VAE`,
  `reparameterize` and `model`, whole, with the same attributes, names,
  defaults and call order:

      Encoder(latents)(x):  h = relu(Dense(500, name='fc1')(x))
                            return Dense(latents, name='fc2_mean')(h),
                                   Dense(latents, name='fc2_logvar')(h)
      Decoder()(z):         return Dense(784, name='fc2')(relu(Dense(500, name='fc1')(z)))
      VAE(latents=20):      setup: self.encoder = Encoder(self.latents)
                                   self.decoder = Decoder()
          __call__(x, z_rng): mean, logvar = self.encoder(x)
                              z = reparameterize(z_rng, mean, logvar)
                              return self.decoder(z), mean, logvar
          generate(z):        return sigmoid(self.decoder(z))
      reparameterize(rng, mean, logvar):
          std = exp(0.5 logvar); eps = random.normal(rng, logvar.shape)
          return mean + eps * std

- examples/vae/train.py (read at commit
  7e9bb7619d8da9d7b5d24e805e7e3e6a31551c75; the single-file train.py of
  b60f7f45b90f8fc42a88b1639c9cc88a40b298d3 has the same loss, train_step
  and keys, with `random.PRNGKey(0)` for `random.key(0)`):
  `kl_divergence` and `binary_cross_entropy_with_logits` (both under
  `jax.vmap`, one value per example), train_step's loss, and
  train_and_evaluate's keys and optimiser (for the curve below):

      kl_divergence(mean, logvar) = -0.5 * sum(1 + logvar - mean^2 - exp(logvar))
      binary_cross_entropy_with_logits(logits, labels):
          l = log_sigmoid(logits)
          return -sum(labels * l + (1 - labels) * log(-expm1(l)))
      loss = bce(recon_x, x).mean() + kld(mean, logvar).mean()

  (sums over the 784 pixels / 20 latents, means over the batch). The
  labels are the inputs themselves; log(-expm1(log_sigmoid(l))) is
  log(1 - sigmoid(l)), so bce = sum(softplus(l) - x l).

Not in the source: `call_with_eps(vae, x, eps)`, applied as
`vae.apply(variables, x, eps, method=call_with_eps)`, is `VAE.__call__`
with the noise given: `mean + eps * exp(0.5 * logvar)` in place of
reparameterize's draw (so VAE keeps the source's methods only). The script
checks that `__call__(x, key)` and `call_with_eps(x, random.normal(key,
(B, 20)))` agree bit for bit.

What Flax does with it:

- `nn.Dense(F)`: x @ kernel + bias, kernel (in, F), bias (F); Flax's
  initialisation is `lecun_normal()` (a normal truncated at +-2, scaled so
  the standard deviation is 1 / sqrt(in): 0.0357 for fc1 of the encoder,
  0.0447 for in = 500, 0.2236 for the decoder's fc1) and zero biases.
  `nn.relu` is max(x, 0), `nn.sigmoid` 1 / (1 + exp(-x)),
  `nn.log_sigmoid` -softplus(-x).
- The submodules built in `setup` take their attribute names, so the
  paths are `encoder/...` and `decoder/...`, and both Dense stacks' first
  layer is `fc1`. `init` runs `__call__`, which draws the reparameterisation
  noise from its positional `z_rng` (not a Flax RNG stream: `apply` takes
  the key as an argument too).

Parameters (Flax paths and shapes; 815824 in all): `params/encoder/fc1/
{kernel (784, 500), bias (500)}`, `params/encoder/fc2_mean/{kernel (500,
20), bias (20)}`, `params/encoder/fc2_logvar/{kernel (500, 20), bias
(20)}`, `params/decoder/fc1/{kernel (20, 500), bias (500)}`,
`params/decoder/fc2/{kernel (500, 784), bias (784)}`. "params" is the only
collection. The script prints the paths as it saves.

The checkpoint: the model initialised by Flax from `rng, key =
random.split(PRNGKey(71))`, `init(key, x, rng)`, then every parameter
perturbed by `fixture_out.perturb` (`p + 0.1 * N(0, 1)`, so the zero
biases hide nothing) from `np.random.default_rng(20261271)`, after "x",
"z", "eps" and "train_x" are drawn from that generator, in that order.
Everything saved is float32.

In flax_port_vae.json (arrays are `{"shape": [...], "data": [flat
row-major]}`, `flax_keys.arr`):

- "x" [3, 784]: the inputs, uniform in [0, 1) (`rng.random`, rounded to
  float32), used as the bce's labels too (soft labels);
- "z" [3, 20]: standard normal latents for `generate`;
- "eps" [3, 20]: a fixed standard normal noise, the reparameterisation's;
- "mean", "logvar" [3, 20]: the encoder's outputs on x;
- "recon" [3, 784]: `__call__`'s recon_x (the decoder's logits) with the
  noise eps (`call_with_eps`);
- "generate" [3, 784]: `VAE.generate(z)`, sigmoids;
- "loss": train.py's loss of (recon, mean, logvar) against x;
- "grads": d loss / d params (noise eps), sampled: "params/<Flax path>"
  -> {"index": [flat row-major indices into the leaf in Flax's layout,
  (in, out) for kernels], "value": [the gradient there]}. For every leaf
  of at most 10000 elements (FULL_GRAD_MAX: the biases and the three
  500 x 20 / 20 x 500 kernels) every index, 0 .. size - 1; for the two
  larger kernels, params/decoder/fc2/kernel then params/encoder/fc1/kernel
  (sorted path order), 200 (GRAD_SAMPLES) distinct indices
  `rng.choice(size, 200, replace=False)` from the same generator after
  the perturbation, sorted ascending. Whole gradients of those two
  (784000 values, twice) would add some 23 MB to the JSON;
- "mean_f64", "logvar_f64", "recon_f64", "generate_f64", "loss_f64",
  "grads_f64" (same indices): the same in float64, on the float32
  checkpoint's values widened (x, z and eps widened likewise), for a
  float64 port to be held to at 1e-9;
- "paths": the sorted "/" paths of every leaf of the msgpack;
  "num_params": 815824;
- "train_x", "curve_seeds", "curves", "curve_mean", "curve_std": the
  training curve below.

The training curve. "train_x" [16, 784], drawn after "eps": 4 prototype
binary images (`rng.random((4, 784)) < 0.5`), each repeated 4 times in a
row (rows 4 k .. 4 k + 3 come from prototype k), then every pixel of
every row flipped where `rng.random((16, 784)) < 0.05`; 0.0 / 1.0, 6251
ones. For each seed s in "curve_seeds" [0, 1, 2, 3, 4], train.py's
train_and_evaluate with train_x as the only batch, every step:

    rng = PRNGKey(s); rng, key = random.split(rng)
    params = VAE(20).init(key, jnp.ones((16, 784)), rng)['params']   # no perturbation
    state = TrainState.create(apply_fn=..., params=params, tx=optax.adam(1e-3))
    rng, z_key, eval_rng = random.split(rng, 3)    # as train.py (unused here)
    for step in range(40):
        rng, key = random.split(rng)
        loss, grads = value_and_grad(loss)(state.params)   # __call__(train_x, key)
        state = state.apply_gradients(grads=grads)

(the noise of each step is `random.normal(key, (16, 20))`, drawn inside
`__call__`; `random.key(s)`, the newest train.py's, has the same bits as
`PRNGKey(s)`). "curves" [5][40]: per seed, the loss of each step,
computed before that step's update; "curve_mean", "curve_std": per step
over the 5 seeds (numpy's std, ddof 0), 40 values each. optax.adam(1e-3):
b1 0.9, b2 0.999, eps 1e-8 outside the square root, bias-corrected. Run
on CPU (an AMD EPYC machine) this gave a mean loss of 609.7689 at step 0
(std 5.5593), 564.2252 at step 1 (2.5794), 337.5828 at step 10
(14.5573), 154.5195 at step 20 (2.8133) and 112.4241 at step 39 (std
1.1994; the five last losses 110.95 .. 114.47): the data are being
learnt, and the curve still falls at step 39 (by about 1.3 a step, and
not monotonically: the mean rises from step 35 to 36). The script prints
these figures as it runs.

Flax's float32 run (on CPU, an AMD EPYC machine) is within 3.6e-6 of
"mean_f64" (largest |mean| 6.18), 3.3e-6 of "logvar_f64" (largest 6.28),
1.9e-5 of "recon_f64" (largest |logit| 28.0), 3.3e-7 of "generate_f64",
8.8e-5 of "loss_f64" (2432.496182; float32 2432.496094: per example bce
2425.0, 1614.1, 2752.8, kld 181.1, 143.4, 181.2) and 1.2e-3 of
"grads_f64" (in fc2_logvar's kernel, whose largest gradient is 1410; at
most 1.7e-6 of max(a leaf's largest gradient, 1)). The float64 pass also
checks the description above outside Flax: a plain numpy float64 forward
with the bce as softplus(l) - x l matches Flax's outputs and loss within
1.4e-12, and the same in jax.numpy, differentiated, matches "grads_f64"
within 2.3e-13. The script prints these figures as it runs.

Gradients a comparison must treat with an absolute tolerance: 156 of the
encoder's 500 hidden units and 137 of the decoder's are off (relu) on all
3 examples, so their rows of the fc2 kernels, their biases' entries and
their columns of the fc1 kernels have gradient exactly 0 in both
precisions: 3120 of each encoder fc2 kernel's 10000, 2740 of the decoder
fc1 kernel's, 68 of encoder/fc1/kernel's 200 samples, 51 of
decoder/fc2/kernel's.

train.py's bce is not finite for large logits: log_sigmoid(l) underflows
to -0 once exp(-l) falls below the smallest normal number (XLA's CPU
kernels flush subnormals): l >= 88 in float32, l >= 709 in float64. Then
log(-expm1(-0)) = log(0) = -inf, and the bce is inf for a label below 1
and NaN for a label of exactly 1 (0 * -inf), with NaN gradients. Here
|logits| <= 28 (the script asserts < 80), and the stable softplus form
agrees.
"""

from fixture_out import enable_x64_in_f64_pass, main_f64, normal, perturb, save, tree_gap

# The float64 reference pass (see `vae_f64`) runs in a process of its own:
# `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax.training import train_state  # noqa: E402
from flax.traverse_util import flatten_dict  # noqa: E402
from jax import random  # noqa: E402

from flax_keys import arr, from_arr  # noqa: E402

NAME = "flax_port_vae"
BATCH, PIXELS, LATENTS = 3, 784, 20
NUM_PARAMS = 815824

# Gradients of leaves of at most FULL_GRAD_MAX elements are stored whole;
# of the larger ones (the two 784 x 500 / 500 x 784 kernels) GRAD_SAMPLES
# entries drawn from the fixture's generator; see the docstring.
FULL_GRAD_MAX = 10000
GRAD_SAMPLES = 200

# The training curve.
TRAIN_PROTOTYPES, TRAIN_REPEATS, TRAIN_FLIP = 4, 4, 0.05
TRAIN_STEPS = 40
TRAIN_SEEDS = [0, 1, 2, 3, 4]
LEARNING_RATE = 1e-3


# google/flax examples/vae/models.py


class Encoder(nn.Module):
    """VAE Encoder."""

    latents: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(500, name="fc1")(x)
        x = nn.relu(x)
        mean_x = nn.Dense(self.latents, name="fc2_mean")(x)
        logvar_x = nn.Dense(self.latents, name="fc2_logvar")(x)
        return mean_x, logvar_x


class Decoder(nn.Module):
    """VAE Decoder."""

    @nn.compact
    def __call__(self, z):
        z = nn.Dense(500, name="fc1")(z)
        z = nn.relu(z)
        z = nn.Dense(784, name="fc2")(z)
        return z


class VAE(nn.Module):
    """Full VAE model."""

    latents: int = 20

    def setup(self):
        self.encoder = Encoder(self.latents)
        self.decoder = Decoder()

    def __call__(self, x, z_rng):
        mean, logvar = self.encoder(x)
        z = reparameterize(z_rng, mean, logvar)
        recon_x = self.decoder(z)
        return recon_x, mean, logvar

    def generate(self, z):
        return nn.sigmoid(self.decoder(z))


def reparameterize(rng, mean, logvar):
    std = jnp.exp(0.5 * logvar)
    eps = random.normal(rng, logvar.shape)
    return mean + eps * std


def model(latents):
    return VAE(latents=latents)


# google/flax examples/vae/train.py: the loss.


@jax.vmap
def kl_divergence(mean, logvar):
    return -0.5 * jnp.sum(1 + logvar - jnp.square(mean) - jnp.exp(logvar))


@jax.vmap
def binary_cross_entropy_with_logits(logits, labels):
    logits = nn.log_sigmoid(logits)
    return -jnp.sum(labels * logits + (1.0 - labels) * jnp.log(-jnp.expm1(logits)))


def vae_loss(recon_x, x, mean, logvar):
    """train_step's loss: bce_loss + kld_loss, each the mean over the batch."""
    bce_loss = binary_cross_entropy_with_logits(recon_x, x).mean()
    kld_loss = kl_divergence(mean, logvar).mean()
    return bce_loss + kld_loss


# Not in the source: VAE.__call__ with the noise given instead of drawn
# (applied with `method=`, so VAE itself stays as the source has it).


def call_with_eps(vae, x, eps):
    """VAE.__call__ with `random.normal(z_rng, logvar.shape)` replaced by
    eps: reparameterize's `std = exp(0.5 logvar)`, `mean + eps * std`."""
    mean, logvar = vae.encoder(x)
    std = jnp.exp(0.5 * logvar)
    z = mean + eps * std
    recon_x = vae.decoder(z)
    return recon_x, mean, logvar


def make_model():
    return model(LATENTS)


# The sampled gradients.


def grad_indices(params, rng):
    """{"params/<path>": flat row-major indices} of the gradient entries
    the JSON keeps: every index of a leaf of at most FULL_GRAD_MAX
    elements; for a larger one, in sorted path order, GRAD_SAMPLES distinct
    indices `rng.choice(size, GRAD_SAMPLES, replace=False)`, sorted."""
    out = {}
    for k, v in sorted(flatten_dict(params, sep="/").items()):
        size = int(np.asarray(v).size)
        if size <= FULL_GRAD_MAX:
            out[f"params/{k}"] = list(range(size))
        else:
            out[f"params/{k}"] = sorted(int(i) for i in rng.choice(size, GRAD_SAMPLES, replace=False))
    return out


def sampled(grads, indices):
    """{"params/<path>": {"index", "value"}} of the gradients at `indices`."""
    flat = flatten_dict(grads, sep="/")
    assert sorted(f"params/{k}" for k in flat) == sorted(indices)
    return {
        key: {"index": idx, "value": [float(v) for v in np.asarray(flat[key[len("params/"):]]).reshape(-1)[idx]]}
        for key, idx in sorted(indices.items())
    }


# The fixture.


def outputs(vae, params, x, z, eps):
    """(loss, (recon, mean, logvar, generate)), d loss / d params; the
    noise is eps."""
    def loss_fn(params):
        recon, mean, logvar = vae.apply({"params": params}, x, eps, method=call_with_eps)
        return vae_loss(recon, x, mean, logvar), (recon, mean, logvar)

    @jax.jit
    def run(params):
        (loss, (recon, mean, logvar)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        generate = vae.apply({"params": params}, z, method=VAE.generate)
        return (loss, (recon, mean, logvar, generate)), grads

    return run(params)


def train_data(rng):
    """TRAIN_PROTOTYPES binary images (each pixel 1 with probability 1/2),
    each repeated TRAIN_REPEATS times in a row, every pixel of every copy
    flipped with probability TRAIN_FLIP."""
    protos = rng.random((TRAIN_PROTOTYPES, PIXELS)) < 0.5
    flips = rng.random((TRAIN_PROTOTYPES * TRAIN_REPEATS, PIXELS)) < TRAIN_FLIP
    return (np.repeat(protos, TRAIN_REPEATS, axis=0) ^ flips).astype(np.float32)


def train_curves(vae, train_x):
    """train.py's train_and_evaluate on one full batch: per seed, the loss
    of each of TRAIN_STEPS steps (before that step's update)."""
    batch = jnp.asarray(train_x)

    @jax.jit
    def train_step(state, batch, z_rng):
        def loss_fn(params):
            recon_x, mean, logvar = vae.apply({"params": params}, batch, z_rng)
            return vae_loss(recon_x, batch, mean, logvar)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    curves = []
    for seed in TRAIN_SEEDS:
        rng = random.PRNGKey(seed)
        rng, key = random.split(rng)
        init_data = jnp.ones((len(train_x), PIXELS), jnp.float32)
        state = train_state.TrainState.create(
            apply_fn=vae.apply,
            params=vae.init(key, init_data, rng)["params"],
            tx=optax.adam(LEARNING_RATE),
        )
        rng, z_key, eval_rng = random.split(rng, 3)
        curve = []
        for _ in range(TRAIN_STEPS):
            rng, key = random.split(rng)
            state, loss = train_step(state, batch, key)
            curve.append(float(loss))
        curves.append(curve)
    curves = np.asarray(curves)
    mean, std = curves.mean(axis=0), curves.std(axis=0)
    print(f"train: {len(train_x)} binary images ({TRAIN_PROTOTYPES} prototypes x {TRAIN_REPEATS}, "
          f"{int(train_x.sum())} ones, {TRAIN_FLIP:.0%} flips), adam({LEARNING_RATE}), {TRAIN_STEPS} "
          f"full-batch steps, seeds {TRAIN_SEEDS}")
    for s in (0, 1, 10, 20, 30, TRAIN_STEPS - 1):
        print(f"  step {s}: mean loss {mean[s]:.4f}, std {std[s]:.4f}")
    print(f"  last losses per seed: {[round(c, 4) for c in curves[:, -1].tolist()]}")
    return {
        "train_x": arr(train_x),
        "curve_seeds": TRAIN_SEEDS,
        "curves": [[float(v) for v in c] for c in curves],
        "curve_mean": [float(v) for v in mean],
        "curve_std": [float(v) for v in std],
    }


def check_eps_call(vae, variables, x):
    """call_with_eps with eps = random.normal(key, (B, latents)) is
    __call__(x, key), to the bit."""
    key = random.PRNGKey(7)
    a = vae.apply(variables, jnp.asarray(x), key)
    b = vae.apply(variables, jnp.asarray(x), random.normal(key, (len(x), LATENTS)), method=call_with_eps)
    for u, v in zip(a, b):
        assert np.array_equal(np.asarray(u), np.asarray(v))
    print(f"{NAME}: __call__(x, key) == call_with_eps(x, random.normal(key, (B, {LATENTS}))) bit for bit")


def vae(out):
    rng = np.random.default_rng(20261271)
    model_ = make_model()
    x = rng.random((BATCH, PIXELS)).astype(np.float32)
    z = normal(rng, (BATCH, LATENTS))
    eps = normal(rng, (BATCH, LATENTS))
    train_x = train_data(rng)
    key, z_rng = random.split(random.PRNGKey(71))
    variables = perturb(model_.init(key, jnp.asarray(x), z_rng), rng)
    indices = grad_indices(variables["params"], rng)

    (loss, (recon, mean, logvar, generate)), grads = outputs(model_, variables["params"], x, z, eps)
    assert recon.shape == (BATCH, PIXELS) and recon.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(recon))) < 80.0  # far from train.py's bce overflow (see docstring)
    check_eps_call(model_, variables, x)
    print(f"{NAME}: loss {float(loss):.6f}, max |recon| {float(jnp.max(jnp.abs(recon))):.3f}, "
          f"logvar in [{float(logvar.min()):.3f}, {float(logvar.max()):.3f}]")
    for k, idx in indices.items():
        if len(idx) == GRAD_SAMPLES:
            print(f"  {k}: {GRAD_SAMPLES} sampled indices, first {idx[:5]}")
    save(out, NAME, variables, {
        "x": arr(x),
        "z": arr(z),
        "eps": arr(eps),
        "mean": arr(mean),
        "logvar": arr(logvar),
        "recon": arr(recon),
        "generate": arr(generate),
        "loss": float(loss),
        "grads": sampled(grads, indices),
        **train_curves(model_, train_x),
    }, NUM_PARAMS)


def plain_forward(xp, params, x, z, eps):
    """The VAE and train.py's loss written out with numpy (xp = np) or
    jax.numpy (xp = jnp), not through Flax, from the docstring's
    description; the bce as softplus(l) - y l. Returns (loss, recon, mean,
    logvar, generate)."""
    def dense(a, p):
        return a @ p["kernel"] + p["bias"]

    def relu(a):
        return xp.maximum(a, 0.0)

    enc, dec = params["encoder"], params["decoder"]
    h = relu(dense(x, enc["fc1"]))
    mean, logvar = dense(h, enc["fc2_mean"]), dense(h, enc["fc2_logvar"])
    latent = mean + eps * xp.exp(0.5 * logvar)
    recon = dense(relu(dense(latent, dec["fc1"])), dec["fc2"])
    generate = 1.0 / (1.0 + xp.exp(-dense(relu(dense(z, dec["fc1"])), dec["fc2"])))
    softplus = xp.maximum(recon, 0.0) + xp.log1p(xp.exp(-xp.abs(recon)))
    bce = xp.sum(softplus - x * recon, axis=1)
    kld = -0.5 * xp.sum(1.0 + logvar - mean * mean - xp.exp(logvar), axis=1)
    return xp.mean(bce) + xp.mean(kld), recon, mean, logvar, generate


def vae_f64(fields, variables):
    """Adds to flax_port_vae.json's fields the same outputs and gradients
    in float64, on the float32 checkpoint's values widened (`variables`):
    "mean_f64", "logvar_f64", "recon_f64", "generate_f64", "loss_f64",
    "grads_f64"."""
    model_ = make_model()
    x, z, eps = from_arr(fields["x"]), from_arr(fields["z"]), from_arr(fields["eps"])
    (loss, (recon, mean, logvar, generate)), grads = outputs(model_, variables["params"], x, z, eps)
    assert recon.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in jax.tree_util.tree_leaves(grads))
    indices = {k: v["index"] for k, v in fields["grads"].items()}
    ys = {"mean": mean, "logvar": logvar, "recon": recon, "generate": generate}
    for k, v in ys.items():
        fields[f"{k}_f64"] = arr(v)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = sampled(grads, indices)
    assert sorted(fields["grads_f64"]) == sorted(fields["grads"]) == fields["paths"]

    # The semantics the docstring states, checked outside Flax: the forward
    # in numpy, the gradients of the same in jax.numpy.
    params64 = jax.tree_util.tree_map(np.asarray, variables["params"])
    ref = plain_forward(np, params64, x, z, eps)
    forward_gap = max(
        float(np.max(np.abs(np.asarray(r) - np.asarray(y))))
        for r, y in zip(ref, (loss, recon, mean, logvar, generate))
    )
    assert forward_gap < 1e-10, forward_gap
    plain_grads = jax.jit(jax.grad(lambda p: plain_forward(jnp, p, x, z, eps)[0]))(variables["params"])
    plain_gap = tree_gap(plain_grads, grads)
    assert plain_gap < 1e-10, plain_gap
    print(f"{NAME} float64: numpy forward and loss within {forward_gap:.2e} of Flax's; jax.numpy "
          f"gradients within {plain_gap:.2e} of grads_f64")

    for k, v in ys.items():
        a = from_arr(fields[k])
        print(f"  {k}: max |f32 - f64| {np.max(np.abs(a - np.asarray(v))):.2e} "
              f"(largest |{k}_f64| {np.max(np.abs(np.asarray(v))):.3f})")
    gap, rel = 0.0, 0.0
    for k, v in fields["grads_f64"].items():
        g64 = np.asarray(v["value"])
        d = float(np.max(np.abs(np.asarray(fields["grads"][k]["value"]) - g64)))
        gap = max(gap, d)
        rel = max(rel, d / max(float(np.max(np.abs(g64))), 1.0))
        print(f"  {k}: {len(g64)} entries, max |grad - grad_f64| {d:.2e} "
              f"(largest |grad_f64| {np.max(np.abs(g64)):.2e}, {int(np.sum(g64 == 0))} exact zeros)")
    print(f"{NAME} float64: |loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e} "
          f"(loss {fields['loss']:.6f}, loss_f64 {float(loss):.6f}), "
          f"max |grads - grads_f64| {gap:.2e} ({rel:.2e} of max(a leaf's largest, 1))")


if __name__ == "__main__":
    main_f64(__file__, vae, NAME, vae_f64)
