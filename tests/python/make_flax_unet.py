"""Writes the fixture of tests/flax_port_unet.rs: a small diffusion U-Net as
DDPM-style Flax code writes it (a sinusoidal timestep embedding, residual
blocks with GroupNorm and the embedding added per channel, self-attention
at the lowest resolution, skips kept in a Python list), as a Flax
checkpoint saved exactly as `flax.serialization.to_bytes(variables)`
returns it, with its output and gradients in float32 and float64.

    /tmp/venv/bin/python tests/python/make_flax_unet.py [OUTDIR]

writes tests/fixtures/flax_port_unet.{msgpack,json}, or those files in
OUTDIR to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, numpy 2.4.6, msgpack 1.2.4 made the committed files
(Python 3.11; requirements.txt). The float64 results come from a second
run of the script in a process of its own (`fixture_out.main_f64`), since
`jax_enable_x64` is process-wide.

The model is written here, not copied from a repository, the way a user of
Flax writes a DDPM U-Net (NHWC):

    def get_timestep_embedding(t, dim):     # t: [B] float
        half = dim // 2
        e = math.log(10000.0) / (half - 1)
        e = jnp.exp(jnp.arange(half) * -e)
        e = t[:, None] * e[None, :]
        return jnp.concatenate([jnp.sin(e), jnp.cos(e)], axis=1)

    ResBlock(features, groups=4)(x, temb):
        h = swish(GroupNorm(groups)(x)); h = Conv(features, (3, 3))(h)
        h = h + Dense(features)(swish(temb))[:, None, None, :]
        h = swish(GroupNorm(groups)(h)); h = Conv(features, (3, 3))(h)
        if x.shape[-1] != features: x = Conv(features, (1, 1), name='skip')(x)
        return x + h

    AttnBlock(heads=2)(x):                  # x [B, H, W, C]
        y = GroupNorm(num_groups=4)(x).reshape(B, H * W, C)
        return x + SelfAttention(num_heads=heads)(y).reshape(B, H, W, C)

    UNet(ch=8, ch_mult=(1, 2))(x, t):
        temb = Dense(4 ch)(swish(Dense(4 ch)(get_timestep_embedding(t, ch))))
        hs = [Conv(ch, (3, 3))(x)]
        per level i: h = ResBlock(ch * mult)(hs[-1], temb); hs.append(h);
                     below the last level also hs.append(avg_pool(h, 2x2, stride 2))
        h = ResBlock(C)(hs[-1], temb); h = AttnBlock()(h); h = ResBlock(C)(h, temb)
        per level, deepest first: twice h = ResBlock(ch * mult)(
                     concatenate([h, hs.pop()], -1), temb);
                     above level 0 h = jax.image.resize(h, 2x, 'nearest')
        return Conv(x.shape[-1], (3, 3))(swish(GroupNorm(num_groups=4)(h)))

Configuration: `UNet(ch=8, ch_mult=(1, 2))` on a batch of 2 3-channel 8x8
images (flaxen's NCHW [2, 3, 8, 8]; NHWC here) and 2 timesteps. `hs` holds
4 maps after the way down (conv_in 8x8x8, ResBlock_0 8x8x8, its 2x2 average
pool 4x4x8, ResBlock_1 4x4x16), and the 4 ResBlocks of the way up pop them
all, last in first out, so it ends empty:

- ResBlock_0: 8 -> 8 (8x8), no skip; ResBlock_1: 8 -> 16 (4x4), `skip`;
  ResBlock_2, AttnBlock_0, ResBlock_3: 16 -> 16 (4x4), no skip;
- ResBlock_4: [h 16, ResBlock_1 16] = 32 -> 16, `skip`; ResBlock_5: [h 16,
  pool 8] = 24 -> 16, `skip`; nearest upsampling 4x4 -> 8x8;
- ResBlock_6: [h 16, ResBlock_0 8] = 24 -> 8, `skip`; ResBlock_7: [h 8,
  conv_in 8] = 16 -> 8, `skip`; then GroupNorm_0, swish, Conv_1 (8 -> 3).

Flax's automatic names count per class in call order within each module:
`Conv_0` is conv_in and `Conv_1` the output conv of UNet (the convs inside
the blocks are the blocks' own), `Dense_0`, `Dense_1` the timestep MLP,
`GroupNorm_0` the final norm; inside a ResBlock, `Conv_0`, `GroupNorm_0`
are the first step, `Dense_0` the embedding projection, `Conv_1`,
`GroupNorm_1` the second step, and the explicitly named `skip` takes no
number. The script prints each ResBlock's input shape and whether it
projects as it runs.

What Flax does with it:

- `nn.GroupNorm(num_groups=4)`: epsilon 1e-6 (not PyTorch's 1e-5),
  contiguous groups (channel c in group c // (C / 4)), statistics per
  example and group over (H, W, the group's channels), var = max(0,
  mean(x^2) - mean(x)^2) (`use_fast_variance`), y = (x - mean) *
  rsqrt(var + 1e-6) * scale + bias, per-channel `scale` and `bias`.
  Groups of 2 channels (8 channels) to 8 (32, ResBlock_4's input).
- `nn.swish` is `jax.nn.silu`, x * sigmoid(x).
- `nn.Conv(F, (3, 3))`: stride 1, "SAME" padding (1, 1) by zeros, HWIO
  kernel, bias; (1, 1) kernels for `skip`, no padding.
- `nn.Dense`: x @ kernel + bias, kernel (in, out). The embedding
  projection [B, F] is broadcast over H and W.
- `nn.avg_pool(h, (2, 2), strides=(2, 2))`: "VALID", the mean of each 2x2
  window; `jax.image.resize(h, (B, 2H, 2W, C), 'nearest')` repeats every
  pixel 2x2 (output pixel i reads input pixel floor(i / 2)).
- `jnp.concatenate([h, hs.pop()], axis=-1)`: h's channels first, the skip's
  after (NCHW's axis 1 in flaxen).
- `nn.SelfAttention(num_heads=2)` (its `__call__` raises a
  DeprecationWarning, hidden by Python's default filters, pointing to
  `MultiHeadDotProductAttention.__call__(inputs_q)`; same computation and
  parameters): qkv_features and
  out_features default to the input's 16 features, so head_dim 8; `query`,
  `key`, `value` are DenseGeneral with kernels (16, 2, 8) (features,
  heads, head_dim) and biases (2, 8); `out` has kernel (2, 8, 16) (heads,
  head_dim, features) and bias (16). The query is divided by sqrt(8)
  before q . k; softmax over the 16 keys (4x4 pixels, flattened row-major
  over (H, W)); no mask, dropout_rate 0 (deterministic).
- The timestep embedding: `math.log(10000.0) / (half - 1)` is a Python
  float (ln(10000) / 3 here), so `jnp.arange(4) * -e` and its `exp` are
  float32 (float64 in the float64 pass); frequencies 1, 0.0464, 0.00215,
  0.0001; [sin(t f), cos(t f)] (sines first). t is an integer here, so t
  times the first frequency, 1, is exact in float32.

Parameters (Flax paths and shapes; 38995 in all): `Conv_0/{kernel (3, 3, 3,
8), bias}`, `Dense_0` (8, 32), `Dense_1` (32, 32), `ResBlock_k/{Conv_0,
Conv_1, Dense_0, GroupNorm_0, GroupNorm_1}` for k = 0 .. 7 plus `skip` in
ResBlock_1, 4, 5, 6, 7, `AttnBlock_0/GroupNorm_0`,
`AttnBlock_0/SelfAttention_0/{query,key,value,out}/{kernel,bias}`,
`GroupNorm_0` (8), `Conv_1/{kernel (3, 3, 8, 3), bias}`. No other
collection: "params" is the only one. The script prints the paths as it
saves.

The checkpoint: the model initialised by Flax from `PRNGKey(61)`, then
every parameter perturbed by `fixture_out.perturb` (`p + 0.1 * N(0, 1)`,
so zero biases and unit GroupNorm scales hide nothing) from
`np.random.default_rng(20261261)`, after "x", "t" and "w" are drawn from
that generator. Everything saved is float32.

In flax_port_unet.json (arrays are `{"shape": [...], "data": [flat
row-major]}`, `flax_keys.arr`):

- "x" [2, 3, 8, 8]: a seeded standard normal batch in flaxen's NCHW layout
  (transposed to NHWC here before Flax sees it);
- "t" [2, 1]: the timesteps, `integers(0, 1000, (2, 1))` (integers stored as
  floats); given to Flax as the float32 vector t[:, 0];
- "out" [2, 3, 8, 8]: the output, Flax's NHWC [2, 8, 8, 3] transposed to
  NCHW (flaxen's layout);
- "w" [2, 3, 8, 8]: a fixed standard normal array (NCHW); "loss" = sum(out
  * w), out the NCHW output;
- "grads": d loss / d params keyed "params/<Flax path>"
  ("params/ResBlock_1/skip/kernel" style), for every leaf, in Flax's own
  layouts (HWIO conv kernels, (in, out) Dense kernels, the attention's
  (16, 2, 8) and (2, 8, 16) kernels and (2, 8) biases);
- "out_f64", "loss_f64", "grads_f64": the same in float64, on the float32
  checkpoint's values widened (x, t and w widened likewise), for a float64
  port to be held to at 1e-9;
- "paths": the sorted "/" paths of every leaf of the msgpack;
  "num_params": 38995.

The float64 pass also checks the description above outside Flax: a plain
numpy float64 forward written from it (`plain_forward`, NHWC, no Flax
modules, no jax.image) matches "out_f64" (2.9e-15 here), and the same
written in jax.numpy, differentiated, matches "grads_f64" (3.8e-14). Of
the details it cannot get wrong: GroupNorm epsilon 1e-5 instead of 1e-6
moves the float64 output by 3.1e-5; the two-pass variance instead of
`use_fast_variance` by 5e-15 (in float64); cos before sin in the timestep
embedding by 1.5. t is [223, 85] here. On CPU (an AMD EPYC machine)
Flax's float32 run was within 1.5e-6 of "out_f64" (largest |out| 2.3),
1.1e-5 of "loss_f64" (4.341948; float32 4.341937) and 1.7e-5 of
"grads_f64" (at most 2.6e-6 of max(a leaf's largest gradient, 1)). The
script prints these figures as it runs.

A gradient a comparison must treat with an absolute tolerance:
`SelfAttention_0/key/bias`'s is zero in exact arithmetic (adding a bias to
every key adds the same q . b to every logit of a query row, which the
softmax drops), so "grads" holds float32 rounding there (2e-7) and
"grads_f64" 4e-16.
"""

import math

from fixture_out import enable_x64_in_f64_pass, grad_gaps, main_f64, normal, perturb, save, tree_gap

# The float64 reference pass (see `unet_f64`) runs in a process of its
# own: `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from flax_keys import arr, by_path, from_arr  # noqa: E402

NAME = "flax_port_unet"
BATCH, CHANNELS, SIZE = 2, 3, 8
NUM_PARAMS = 38995


# The model.


def get_timestep_embedding(t, dim):
    """Sinusoidal embedding of the timesteps t [B]: [B, dim], sines first."""
    half = dim // 2
    e = math.log(10000.0) / (half - 1)
    e = jnp.exp(jnp.arange(half) * -e)
    e = t[:, None] * e[None, :]
    return jnp.concatenate([jnp.sin(e), jnp.cos(e)], axis=1)


class ResBlock(nn.Module):
    features: int
    groups: int = 4

    @nn.compact
    def __call__(self, x, temb):
        h = nn.swish(nn.GroupNorm(num_groups=self.groups)(x))
        h = nn.Conv(self.features, (3, 3))(h)
        h = h + nn.Dense(self.features)(nn.swish(temb))[:, None, None, :]
        h = nn.swish(nn.GroupNorm(num_groups=self.groups)(h))
        h = nn.Conv(self.features, (3, 3))(h)
        if x.shape[-1] != self.features:
            x = nn.Conv(self.features, (1, 1), name="skip")(x)
        return x + h


class AttnBlock(nn.Module):
    heads: int = 2

    @nn.compact
    def __call__(self, x):
        B, H, W, C = x.shape
        y = nn.GroupNorm(num_groups=4)(x)
        y = y.reshape(B, H * W, C)
        y = nn.SelfAttention(num_heads=self.heads)(y)  # no dropout: deterministic
        return x + y.reshape(B, H, W, C)


class UNet(nn.Module):
    ch: int = 8
    ch_mult: tuple = (1, 2)

    @nn.compact
    def __call__(self, x, t):
        temb = get_timestep_embedding(t, self.ch)
        temb = nn.Dense(self.ch * 4)(temb)
        temb = nn.Dense(self.ch * 4)(nn.swish(temb))

        hs = [nn.Conv(self.ch, (3, 3))(x)]
        for i, mult in enumerate(self.ch_mult):
            h = ResBlock(self.ch * mult)(hs[-1], temb)
            hs.append(h)
            if i != len(self.ch_mult) - 1:
                hs.append(nn.avg_pool(h, (2, 2), strides=(2, 2)))

        h = hs[-1]
        h = ResBlock(h.shape[-1])(h, temb)
        h = AttnBlock()(h)
        h = ResBlock(h.shape[-1])(h, temb)

        for level in reversed(range(len(self.ch_mult))):
            for _ in range(2):
                h = ResBlock(self.ch * self.ch_mult[level])(jnp.concatenate([h, hs.pop()], axis=-1), temb)
            if level != 0:
                B, H, W, C = h.shape
                h = jax.image.resize(h, (B, H * 2, W * 2, C), method="nearest")
        assert not hs

        h = nn.swish(nn.GroupNorm(num_groups=4)(h))
        return nn.Conv(x.shape[-1], (3, 3))(h)


def make_model():
    return UNet(ch=8, ch_mult=(1, 2))


# Layouts: flaxen's NCHW, Flax's NHWC.


def nhwc(x):
    return jnp.asarray(np.transpose(x, (0, 2, 3, 1)))


def nchw(y):
    return jnp.transpose(y, (0, 3, 1, 2))


def print_blocks(model, x, t):
    """Prints each ResBlock's input shape, features and whether it projects
    the residual (`skip`)."""
    def interceptor(next_fun, args, kwargs, context):
        module = context.module
        if isinstance(module, ResBlock) and context.method_name == "__call__":
            x = args[0]
            print(f"  {'/'.join(module.scope.path)}: in {tuple(x.shape)}, features {module.features}, "
                  f"skip {x.shape[-1] != module.features}")
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        return model.init(jax.random.PRNGKey(0), x, t)


# The fixture.


def loss_and_grads(model, params, x, t, w):
    """x and w NCHW, t [B, 1]: (loss, NCHW out), grads."""
    def loss_fn(params):
        y = nchw(model.apply({"params": params}, nhwc(x), jnp.asarray(t[:, 0])))
        return jnp.sum(y * w), y

    return jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params)


def unet(out):
    rng = np.random.default_rng(20261261)
    model = make_model()
    x = normal(rng, (BATCH, CHANNELS, SIZE, SIZE))
    t = rng.integers(0, 1000, (BATCH, 1)).astype(np.float32)
    w = normal(rng, (BATCH, CHANNELS, SIZE, SIZE))
    variables = perturb(model.init(jax.random.PRNGKey(61), nhwc(x), jnp.asarray(t[:, 0])), rng)

    (loss, y), grads = loss_and_grads(model, variables["params"], x, t, w)
    assert y.shape == (BATCH, CHANNELS, SIZE, SIZE) and y.dtype == jnp.float32
    print(f"{NAME}: t {t[:, 0].tolist()}")
    print_blocks(model, nhwc(x), jnp.asarray(t[:, 0]))
    save(out, NAME, variables, {
        "x": arr(x),
        "t": arr(t),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": by_path(grads, "params"),
    }, NUM_PARAMS)


def plain_forward(xp, params, x, t):
    """UNet written out with numpy (xp = np) or jax.numpy (xp = jnp), not
    through Flax, from the docstring's description: x NHWC, t [B]; returns
    the NHWC output."""
    def swish(a):
        return a / (1.0 + xp.exp(-a))

    def dense(a, p):
        return a @ p["kernel"] + p["bias"]

    def conv(a, p):
        """Stride 1, "SAME" (odd kernels: (k // 2, k // 2) zeros)."""
        k = p["kernel"]
        kh, kw = k.shape[:2]
        _, H, W, _ = a.shape
        a = xp.pad(a, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
        y = p["bias"]
        for i in range(kh):
            for j in range(kw):
                y = y + a[:, i:i + H, j:j + W, :] @ k[i, j]
        return y

    def group_norm(a, p, groups=4):
        B, H, W, C = a.shape
        g = a.reshape(B, H, W, groups, C // groups)
        mean = g.mean(axis=(1, 2, 4), keepdims=True)
        var = xp.maximum(0.0, (g * g).mean(axis=(1, 2, 4), keepdims=True) - mean * mean)
        g = (g - mean) / xp.sqrt(var + 1e-6)
        return g.reshape(B, H, W, C) * p["scale"] + p["bias"]

    def res_block(a, temb, p):
        h = conv(swish(group_norm(a, p["GroupNorm_0"])), p["Conv_0"])
        h = h + dense(swish(temb), p["Dense_0"])[:, None, None, :]
        h = conv(swish(group_norm(h, p["GroupNorm_1"])), p["Conv_1"])
        if "skip" in p:
            a = conv(a, p["skip"])
        return a + h

    def attn_block(a, p):
        B, H, W, C = a.shape
        y = group_norm(a, p["GroupNorm_0"]).reshape(B, H * W, C)
        sa = p["SelfAttention_0"]
        q, k, v = (xp.einsum("bnc,chd->bnhd", y, sa[n]["kernel"]) + sa[n]["bias"]
                   for n in ("query", "key", "value"))
        logits = xp.einsum("bqhd,bkhd->bhqk", q / math.sqrt(q.shape[-1]), k)
        e = xp.exp(logits - logits.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        o = xp.einsum("bhqk,bkhd->bqhd", weights, v)
        o = xp.einsum("bqhd,hdc->bqc", o, sa["out"]["kernel"]) + sa["out"]["bias"]
        return a + o.reshape(B, H, W, C)

    def avg_pool(a):
        B, H, W, C = a.shape
        return a.reshape(B, H // 2, 2, W // 2, 2, C).mean(axis=(2, 4))

    def upsample(a):
        return xp.repeat(xp.repeat(a, 2, axis=1), 2, axis=2)

    half = 4
    freqs = xp.exp(xp.arange(half) * -(math.log(10000.0) / (half - 1)))
    e = t[:, None] * freqs[None, :]
    temb = xp.concatenate([xp.sin(e), xp.cos(e)], axis=1)
    temb = dense(swish(dense(temb, params["Dense_0"])), params["Dense_1"])

    p = params
    h0 = conv(x, p["Conv_0"])
    h1 = res_block(h0, temb, p["ResBlock_0"])
    h2 = avg_pool(h1)
    h3 = res_block(h2, temb, p["ResBlock_1"])
    h = res_block(h3, temb, p["ResBlock_2"])
    h = attn_block(h, p["AttnBlock_0"])
    h = res_block(h, temb, p["ResBlock_3"])
    h = res_block(xp.concatenate([h, h3], axis=-1), temb, p["ResBlock_4"])
    h = res_block(xp.concatenate([h, h2], axis=-1), temb, p["ResBlock_5"])
    h = upsample(h)
    h = res_block(xp.concatenate([h, h1], axis=-1), temb, p["ResBlock_6"])
    h = res_block(xp.concatenate([h, h0], axis=-1), temb, p["ResBlock_7"])
    return conv(swish(group_norm(h, p["GroupNorm_0"])), p["Conv_1"])


def unet_f64(fields, variables):
    """Adds to flax_port_unet.json's fields the same forward and gradient
    in float64, on the float32 checkpoint's values widened (`variables`):
    "out_f64", "loss_f64", "grads_f64"."""
    model = make_model()
    x, t, w = from_arr(fields["x"]), from_arr(fields["t"]), from_arr(fields["w"])
    (loss, y), grads = loss_and_grads(model, variables["params"], x, t, w)
    assert y.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in jax.tree_util.tree_leaves(grads))
    fields["out_f64"] = arr(y)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = by_path(grads, "params")
    assert sorted(fields["grads_f64"]) == sorted(fields["grads"]) == fields["paths"]

    # The semantics the docstring states, checked outside Flax: the forward
    # in numpy, the gradients of the same in jax.numpy.
    params64 = jax.tree_util.tree_map(np.asarray, variables["params"])
    x_nhwc = np.transpose(x, (0, 2, 3, 1))
    ref = np.transpose(plain_forward(np, params64, x_nhwc, t[:, 0]), (0, 3, 1, 2))
    forward_gap = float(np.max(np.abs(ref - np.asarray(y))))
    assert forward_gap < 1e-12, forward_gap

    def plain_loss(params):
        yp = plain_forward(jnp, params, jnp.asarray(x_nhwc), jnp.asarray(t[:, 0]))
        return jnp.sum(jnp.transpose(yp, (0, 3, 1, 2)) * w)

    plain_gap = tree_gap(jax.jit(jax.grad(plain_loss))(variables["params"]), grads)
    assert plain_gap < 1e-12, plain_gap
    print(f"{NAME} float64: numpy forward within {forward_gap:.2e} of out_f64; jax.numpy "
          f"gradients within {plain_gap:.2e} of grads_f64")

    out32 = from_arr(fields["out"])
    gap, rel = grad_gaps(fields, floor=1.0, each=True)
    print(f"{NAME} float64: max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e} "
          f"(largest |out_f64| {np.max(np.abs(np.asarray(y))):.2e}), "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e} (loss_f64 {float(loss):.6f}), "
          f"max |grads - grads_f64| {gap:.2e} ({rel:.2e} of max(a leaf's largest, 1))")


if __name__ == "__main__":
    main_f64(__file__, unet, NAME, unet_f64)
