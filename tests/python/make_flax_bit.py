"""Writes the fixture of a BiT-style ResNet port: a Flax checkpoint of the
ResNet root and stages of google-research/vision_transformer's hybrid
ViT (weight-standardised convolutions, GroupNorm), saved exactly as
`flax.serialization.to_bytes(variables)` returns it, with its output and
gradients in float32 and float64.

    /tmp/venv/bin/python tests/python/make_flax_bit.py [OUTDIR]

writes tests/fixtures/flax_port_bit.{msgpack,json}, or those files in
OUTDIR to compare a fresh run with the committed ones. jax 0.10.2, jaxlib
0.10.2, flax 0.12.8, numpy 2.4.6, msgpack 1.2.4 made the committed files
(Python 3.11; requirements.txt). The float64 results come from a second
run of the script in a process of its own (`fixture_out.main_f64`), since
`jax_enable_x64` is process-wide.

The model is retyped here from two files of the repository:

- vit_jax/models_resnet.py (read at commit
  2ecbc73207056d8fcbd7513ab43cd417a0b385b3; the file at
  21c8bfa562b577348a0d3a81d3f17148c42249e1 differs only in its copyright
  year): `weight_standardize`, `StdConv`, `ResidualUnit`, `ResNetStage`,
  whole, with the same attributes, defaults, initialisers, submodule
  names and call order (`ResNetStage.block_size` keeps the source's
  `Sequence[int]` annotation though an int is passed);
- vit_jax/models_vit.py (read at commit
  06862cdaf01e68e19de60c1853b3437a107d9c2c; the same branch at
  143bd26cf285f835a2d1954f85b14f33f7d3ea8e): the `if self.resnet is not
  None:` branch of `VisionTransformer.__call__`, root block and stages,
  line for line, as the `__call__` of `ResNetBackbone`, a module of this
  script (the source has no such class; its submodules keep the source's
  names, so the Flax paths are those of a hybrid ViT's ResNet part, without
  the ViT's own leaves). Dropped: everything after the branch (the
  `embedding` conv, `cls`, `Transformer`, `pre_logits`, `head`), the
  `train` flag (the branch does not read it), and the `ml_collections`
  ConfigDict `resnet`, replaced by a frozen dataclass with the same
  `num_layers` and `width_factor` fields.

Configuration: `ResNetBackbone(resnet=ResNetConfig(num_layers=(2, 1),
width_factor=0.5))`, so width = int(64 * 0.5) = 32, on a batch of 2
3-channel 32x32 images (flaxen's NCHW [2, 3, 32, 32]; NHWC here):

- `conv_root`: StdConv 32, 7x7, stride 2, no bias, "SAME": 32 -> 16,
  padding (2, 3) on both axes (the source does not give explicit (3, 3)
  padding, as Flax's ImageNet ResNet does; the extra row and column are at
  the bottom and right); `gn_root`; relu; `nn.max_pool` 3x3 stride 2
  "SAME": 16 -> 8, padding (0, 1) by -inf (the padded cells never win).
- `block1` (ResNetStage, nout 32, first_stride (1, 1)): `unit1`, `unit2`;
  `block2` (nout 64, first_stride (2, 2)): `unit1`. The output is
  block2's: NHWC [2, 4, 4, 256] (256 = 64 * 4).
- ResidualUnit(features F, strides s), a bottleneck: needs_projection =
  (input channels != 4 F) or s != (1, 1), decided from the unit's input;
  if so the residual is `conv_proj` (StdConv 4F, 1x1, stride s, no bias,
  "SAME", which is zero padding for a 1x1 kernel: at stride 2 it takes
  the even rows and columns) then `gn_proj`, else the input itself. Then
  `conv1` (StdConv F, 1x1, stride 1), `gn1`, relu, `conv2` (StdConv F,
  3x3, stride s, "SAME"), `gn2`, relu, `conv3` (StdConv 4F, 1x1, stride
  1), `gn3` (scale initialised to zeros), and relu(residual + y). All
  StdConvs have no bias. Here block1/unit1 projects (32 channels in, 128
  out, stride 1), block1/unit2 does not (128 in, 128 out), block2/unit1
  projects (128 in, 256 out, stride 2). The stride sits on conv2 (3x3)
  and conv_proj, never on conv1. conv2 "SAME": (1, 1) at stride 1 (8 ->
  8), (0, 1) at stride 2 (8 -> 4).
- StdConv is nn.Conv whose `param` standardises the kernel when the
  parameter's name is 'kernel', every time the module is called (the
  stored parameter is the raw kernel; the convolution uses the
  standardised one, and gradients flow through the standardisation back to
  the raw kernel): over axes [0, 1, 2] of the HWIO kernel, i.e. per output
  channel over (kh, kw, in), OIHW's axes (1, 2, 3): w = w - mean(w); w = w
  / (std(w) + 1e-5), std the population standard deviation (jnp.std,
  ddof 0; jnp recomputes the mean of the already centred w), eps added to
  the standard deviation, not inside a square root with the variance.
  Flax's own Conv then runs with that kernel, as usual.
- Every GroupNorm is `nn.GroupNorm()`'s defaults: num_groups 32 (so group
  size = channels / 32: 1 for 32 channels, 2 for 64, 4 for 128, 8 for
  256), contiguous groups (channel c is in group c // group_size), epsilon
  1e-6, statistics per example and group over (H, W, the group's
  channels), var = max(0, mean(x^2) - mean(x)^2) (`use_fast_variance`),
  y = (x - mean) * rsqrt(var + 1e-6) * scale + bias with per-channel
  scale and bias. The smallest groups here are block2/unit1's gn2 (4x4
  map, 2 channels: 32 values).

A float32 check cannot tell every one of these apart: with this
checkpoint, population vs sample (ddof 1) std in the standardisation
moves "out" by 4e-7 and the gradients by 7e-6, GroupNorm epsilon 1e-5 vs
1e-6 moves them by 7e-7 and 1.2e-5, below the float32 run's own distance
from float64 (below); the float64 references, held to 1e-9, tell them
apart. (A uniform factor on a kernel is mostly undone by the GroupNorm
after its conv; only its interplay with the 1e-5 survives.) eps inside
the square root, sqrt(var + 1e-5), moves "out" by 3e-4.

Parameters (Flax paths and shapes; 137120 in all): `conv_root/kernel`
(7, 7, 3, 32); `gn_root/{scale,bias}` (32); under `block1/unit1/`:
`conv_proj/kernel` (1, 1, 32, 128), `gn_proj/{scale,bias}` (128),
`conv1/kernel` (1, 1, 32, 32), `gn1/*` (32), `conv2/kernel` (3, 3, 32,
32), `gn2/*` (32), `conv3/kernel` (1, 1, 32, 128), `gn3/*` (128); under
`block1/unit2/`: `conv1/kernel` (1, 1, 128, 32), `gn1/*` (32),
`conv2/kernel` (3, 3, 32, 32), `gn2/*` (32), `conv3/kernel` (1, 1, 32,
128), `gn3/*` (128); under `block2/unit1/`: `conv_proj/kernel` (1, 1,
128, 256), `gn_proj/*` (256), `conv1/kernel` (1, 1, 128, 64), `gn1/*`
(64), `conv2/kernel` (3, 3, 64, 64), `gn2/*` (64), `conv3/kernel` (1, 1,
64, 256), `gn3/*` (256). No batch_stats: GroupNorm keeps none, so
"params" is the only collection. The script prints the paths as it saves.

The checkpoint: the model initialised by Flax from `PRNGKey(41)`, then
every parameter perturbed from a seeded numpy generator by
`fixture_out.perturb` (`p + 0.1 * N(0, 1)`, so the zero-init gn3 scales
and the zero biases hide nothing). Everything saved is float32.

In flax_port_bit.json (arrays are `{"shape": [...], "data": [flat
row-major]}`, `flax_keys.arr`):

- "x" [2, 3, 32, 32]: a seeded standard normal batch in flaxen's NCHW
  layout (transposed to NHWC here before Flax sees it);
- "out" [2, 256, 4, 4]: the feature map, Flax's NHWC [2, 4, 4, 256]
  transposed to NCHW (flaxen's layout). It ends in a relu: about half of
  it is exactly 0;
- "w" [2, 256, 4, 4]: a fixed standard normal array (NCHW); "loss" =
  sum(out * w), out the NCHW output;
- "grads": d loss / d params keyed "params/<Flax path>"
  ("params/block1/unit1/conv2/kernel" style), in Flax's own layout (HWIO
  kernels), for every leaf of at most 5000 elements (FULL_GRAD_MAX): all
  GroupNorm scales and biases, `conv_root/kernel`, and the kernels of
  block1 but its two conv2s;
- "kernel_grads": for the six larger kernels (block1/unit1/conv2,
  block1/unit2/conv2, and block2/unit1's conv_proj, conv1, conv2, conv3),
  the gradient at one output channel of every 8 (CHANNEL_STEP),
  channel 8 i + i % 8 for i = 0, 1, ... (0, 9, 18, 27, 36, ..., 63, 64,
  73, ...: a different place in each run of 8, so every position within
  a GroupNorm group comes up), in HWIO: kernel_grad[..., channels], shape
  (kh, kw, in, len(channels)); "kernel_grad_channels" lists the channels
  per path. The full gradients would make the JSON about 6 MB;
- "out_f64", "loss_f64", "grads_f64", "kernel_grads_f64": the same in
  float64, on the float32 checkpoint's values widened (x and w widened
  likewise), for a float64 port to be held to at 1e-9;
- "paths": the sorted "/" paths of every leaf of the msgpack; "num_params".

Flax's float32 run is within 2.8e-6 of "out_f64" (whose largest value is
4.0) and 3.3e-5 of the float64 gradients (at most 1.3e-6 of a leaf's
largest gradient, which reaches 54 in conv_root's kernel); loss -110.55855
against -110.55857 in float64. A separate NCHW/OIHW reimplementation of
the semantics above in float64 (jax.lax, no Flax modules) met "out_f64"
within 5e-15 and the float64 gradients within 6e-14.

Gradients a comparison must treat with an absolute tolerance: a
standardised kernel's gradient sums to zero over (kh, kw, in) for every
output channel (the standardisation removes the mean), so those sums are
rounding; where the GroupNorm after the conv has one channel per group
(conv_root, conv1 and conv2 of block1, whose outputs have 32 channels),
it is also orthogonal to that channel's centred kernel, up to the
GroupNorm's epsilon (2e-11 in float64 here).
"""

import dataclasses
from typing import Any, Callable, Sequence, Tuple, TypeVar

from fixture_out import enable_x64_in_f64_pass, main_f64, normal, perturb, save

# The float64 reference pass (see `bit_f64`) runs in a process of its own:
# `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax.traverse_util import flatten_dict  # noqa: E402

from flax_keys import arr, from_arr  # noqa: E402

NAME = "flax_port_bit"

# Leaves of more than this many elements get "kernel_grads" (every
# CHANNEL_STEP-th output channel) in the JSON instead of a full "grads"
# entry; see the docstring.
FULL_GRAD_MAX = 5000
CHANNEL_STEP = 8

T = TypeVar("T")


# google-research/vision_transformer vit_jax/models_resnet.py


def weight_standardize(w, axis, eps):
    """Subtracts mean and divides by standard deviation."""
    w = w - jnp.mean(w, axis=axis)
    w = w / (jnp.std(w, axis=axis) + eps)
    return w


class StdConv(nn.Conv):
    """Convolution with weight standardization."""

    def param(self, name: str, init_fn: Callable[..., T], *init_args) -> T:
        param = super().param(name, init_fn, *init_args)
        if name == "kernel":
            param = weight_standardize(param, axis=[0, 1, 2], eps=1e-5)
        return param


class ResidualUnit(nn.Module):
    """Bottleneck ResNet block."""

    features: int
    strides: Sequence[int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        needs_projection = x.shape[-1] != self.features * 4 or self.strides != (1, 1)

        residual = x
        if needs_projection:
            residual = StdConv(
                features=self.features * 4,
                kernel_size=(1, 1),
                strides=self.strides,
                use_bias=False,
                name="conv_proj",
            )(residual)
            residual = nn.GroupNorm(name="gn_proj")(residual)

        y = StdConv(features=self.features, kernel_size=(1, 1), use_bias=False, name="conv1")(x)
        y = nn.GroupNorm(name="gn1")(y)
        y = nn.relu(y)
        y = StdConv(
            features=self.features, kernel_size=(3, 3), strides=self.strides, use_bias=False, name="conv2"
        )(y)
        y = nn.GroupNorm(name="gn2")(y)
        y = nn.relu(y)
        y = StdConv(features=self.features * 4, kernel_size=(1, 1), use_bias=False, name="conv3")(y)

        y = nn.GroupNorm(name="gn3", scale_init=nn.initializers.zeros)(y)
        y = nn.relu(residual + y)
        return y


class ResNetStage(nn.Module):
    """A ResNet stage."""

    block_size: Sequence[int]  # (sic: the source's annotation; an int is passed)
    nout: int
    first_stride: Sequence[int]

    @nn.compact
    def __call__(self, x):
        x = ResidualUnit(self.nout, strides=self.first_stride, name="unit1")(x)
        for i in range(1, self.block_size):
            x = ResidualUnit(self.nout, strides=(1, 1), name=f"unit{i + 1}")(x)
        return x


# The ResNet root of vit_jax/models_vit.py's VisionTransformer (its
# `if self.resnet is not None:` branch), as a module of its own.


@dataclasses.dataclass(frozen=True)
class ResNetConfig:
    """Stands for the `ml_collections.ConfigDict` `resnet` of the source's
    hybrid configs: the model reads `width_factor` and `num_layers`."""

    num_layers: Tuple[int, ...]
    width_factor: float


class ResNetBackbone(nn.Module):
    """VisionTransformer's ResNet root and stages, nothing after them."""

    resnet: Any

    @nn.compact
    def __call__(self, inputs):
        x = inputs
        width = int(64 * self.resnet.width_factor)

        # Root block.
        x = StdConv(features=width, kernel_size=(7, 7), strides=(2, 2), use_bias=False, name="conv_root")(x)
        x = nn.GroupNorm(name="gn_root")(x)
        x = nn.relu(x)
        x = nn.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding="SAME")

        # ResNet stages.
        if self.resnet.num_layers:
            x = ResNetStage(block_size=self.resnet.num_layers[0], nout=width, first_stride=(1, 1), name="block1")(x)
            for i, block_size in enumerate(self.resnet.num_layers[1:], 1):
                x = ResNetStage(
                    block_size=block_size, nout=width * 2**i, first_stride=(2, 2), name=f"block{i + 1}"
                )(x)
        return x


def make_model():
    return ResNetBackbone(resnet=ResNetConfig(num_layers=(2, 1), width_factor=0.5))


# Layouts (flaxen's NCHW, Flax's NHWC) and the sampled gradients.


def nhwc(x):
    return jnp.asarray(np.transpose(x, (0, 2, 3, 1)))


def nchw(y):
    return jnp.transpose(y, (0, 3, 1, 2))


def grad_fields(grads, suffix=""):
    """"grads" (leaves of at most FULL_GRAD_MAX elements, whole) and
    "kernel_grads" (the larger kernels at one output channel of each run of
    CHANNEL_STEP, channel CHANNEL_STEP * i + i % CHANNEL_STEP for i = 0, 1,
    ...: kernel[..., channels] in HWIO) keyed "params/<path>", and
    "kernel_grad_channels" (those channels), with SUFFIX appended to the
    first two names."""
    full, sampled, channels = {}, {}, {}
    for k, v in sorted(flatten_dict(grads, sep="/").items()):
        key = f"params/{k}"
        v = np.asarray(v)
        if v.size <= FULL_GRAD_MAX:
            full[key] = arr(v)
        else:
            assert k.endswith("/kernel") and v.ndim == 4, k
            picked = [i * CHANNEL_STEP + i % CHANNEL_STEP for i in range(v.shape[-1] // CHANNEL_STEP)]
            sampled[key] = arr(v[..., picked])
            channels[key] = picked
    return {f"grads{suffix}": full, f"kernel_grads{suffix}": sampled, "kernel_grad_channels": channels}


def same_padding(size, kernel, stride):
    """lax's "SAME" along one axis: (out, (low, high))."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, (total // 2, total - total // 2)


def print_paddings(title, layers, size):
    """Prints the "SAME" padding of a chain of (name, kernel, stride)
    square layers on a square input of `size`."""
    print(f"{title}:")
    for layer, kernel, stride in layers:
        out, pad = same_padding(size, kernel, stride)
        print(f"  {layer}: {kernel}x{kernel} stride {stride} SAME: {size} -> {out}, padding {pad}")
        size = out


def print_units(model, x):
    """Prints each ResidualUnit's input shape, strides and whether it
    projects the residual."""
    def interceptor(next_fun, args, kwargs, context):
        module = context.module
        if isinstance(module, ResidualUnit) and context.method_name == "__call__":
            x = args[0]
            proj = x.shape[-1] != module.features * 4 or module.strides != (1, 1)
            print(f"  {'/'.join(module.scope.path)}: in {tuple(x.shape)}, features {module.features}, "
                  f"out channels {module.features * 4}, strides {tuple(module.strides)}, "
                  f"needs_projection {proj}")
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        return model.init(jax.random.PRNGKey(0), x)


# The fixture.


def loss_and_grads(model, params, x, w):
    def loss_fn(params):
        y = nchw(model.apply({"params": params}, nhwc(x)))
        return jnp.sum(y * w), y

    return jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params)


def bit(out):
    rng = np.random.default_rng(20261240)
    model = make_model()
    x = normal(rng, (2, 3, 32, 32))
    w = normal(rng, (2, 256, 4, 4))
    variables = perturb(model.init(jax.random.PRNGKey(41), nhwc(x)), rng)

    (loss, y), grads = loss_and_grads(model, variables["params"], x, w)
    assert y.shape == (2, 256, 4, 4) and y.dtype == jnp.float32
    print_paddings(NAME, [
        ("conv_root", 7, 2), ("max_pool", 3, 2), ("block1 conv2", 3, 1),
        ("block2/unit1 conv2", 3, 2),
    ], 32)
    print("  block2/unit1 conv_proj: 1x1 stride 2 SAME: 8 -> 4, padding (0, 0)")
    print_units(model, nhwc(x))
    save(out, NAME, variables, {
        "x": arr(x),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        **grad_fields(grads),
    })


def bit_f64(fields, variables):
    """Adds to flax_port_bit.json's fields the same forward and gradient in
    float64, on the float32 checkpoint's values widened (`variables`):
    "out_f64", "loss_f64", "grads_f64", "kernel_grads_f64"."""
    model = make_model()
    x, w = from_arr(fields["x"]), from_arr(fields["w"])
    (loss, y), grads = loss_and_grads(model, variables["params"], x, w)
    assert y.dtype == jnp.float64
    flat = flatten_dict(grads, sep="/")
    assert all(v.dtype == jnp.float64 for v in flat.values())
    g64 = grad_fields(grads, "_f64")
    assert g64["kernel_grad_channels"] == fields["kernel_grad_channels"]
    fields["out_f64"] = arr(y)
    fields["loss_f64"] = float(loss)
    fields["grads_f64"] = g64["grads_f64"]
    fields["kernel_grads_f64"] = g64["kernel_grads_f64"]
    out32 = from_arr(fields["out"])
    gaps = {}
    for name in ("grads", "kernel_grads"):
        for k, v in fields[f"{name}_f64"].items():
            a, b = from_arr(fields[name][k]), from_arr(v)
            gaps[k] = (float(np.max(np.abs(a - b))), float(np.max(np.abs(b))))
    worst = max(gaps, key=lambda k: gaps[k][0])
    rel = max(gaps, key=lambda k: gaps[k][0] / gaps[k][1])
    print(f"{NAME} float64: max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e} "
          f"(max |out_f64| {np.max(np.abs(np.asarray(y))):.2f}), "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e} (loss_f64 {float(loss):.6f})")
    print(f"  max |grads - grads_f64| {gaps[worst][0]:.2e} ({worst}, whose largest |grad| is {gaps[worst][1]:.2e}); "
          f"relative to a leaf's largest |grad| at most {gaps[rel][0] / gaps[rel][1]:.2e} ({rel})")


if __name__ == "__main__":
    main_f64(__file__, bit, NAME, bit_f64)
