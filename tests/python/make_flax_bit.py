"""DOCSTRING PLACEHOLDER"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

# The float64 reference pass (see `bit_f64`) runs in a process of its own:
# `jax_enable_x64` must be set before jax is imported.
F64 = "--f64-reference"
if F64 in sys.argv:
    os.environ["JAX_ENABLE_X64"] = "1"
from typing import Any, Callable, Sequence, Tuple, TypeVar

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from flax_keys import arr

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
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


# Fixture helpers (as in make_flax_vit.py).


def normal(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def nhwc(x):
    return jnp.asarray(np.transpose(x, (0, 2, 3, 1)))


def nchw(y):
    return jnp.transpose(y, (0, 3, 1, 2))


def perturb(variables, rng):
    """params + 0.1 N(0, 1), leaf by leaf in sorted path order."""
    assert set(variables) == {"params"}
    flat = flatten_dict(variables["params"])
    new = {}
    for path in sorted(flat):
        p = np.asarray(flat[path], np.float32)
        new[path] = jnp.asarray(p + 0.1 * normal(rng, p.shape), jnp.float32)
    return {"params": unflatten_dict(new)}


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


def write_json(path, fields):
    with open(path, "w") as f:
        json.dump(fields, f, separators=(",", ":"))
        f.write("\n")


def save(out, name, variables, fields):
    """Writes NAME.msgpack (to_bytes of the variables) and NAME.json (the
    fields plus the saved leaves' paths and the number of parameters),
    after checking that the msgpack reads back to the same leaves."""
    blob = flax.serialization.to_bytes(variables)
    saved = flatten_dict(flax.serialization.msgpack_restore(blob), sep="/")
    mine = flatten_dict(variables, sep="/")
    assert sorted(saved) == sorted(mine), name
    for path, value in saved.items():
        assert value.dtype == np.float32, path
        assert np.all(np.isfinite(value)), path
        assert np.array_equal(value, np.asarray(mine[path])), path
    num_params = int(sum(v.size for k, v in saved.items() if k.startswith("params/")))
    fields = dict(fields, paths=sorted(saved), num_params=num_params)
    (out / f"{name}.msgpack").write_bytes(blob)
    write_json(out / f"{name}.json", fields)
    sizes = {ext: (out / f"{name}.{ext}").stat().st_size for ext in ("msgpack", "json")}
    print(f"wrote {out / name}.msgpack ({sizes['msgpack']} bytes) and .json ({sizes['json']} bytes): "
          f"{num_params} parameters")
    for path in fields["paths"]:
        print(f"  {path} {saved[path].shape}")


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


def bit_f64(out):
    """Adds to flax_port_bit.json the same forward and gradient in float64,
    on the float32 checkpoint's values widened: "out_f64", "loss_f64",
    "grads_f64", "kernel_grads_f64"."""
    model = make_model()
    path = out / f"{NAME}.json"
    fields = json.loads(path.read_text())
    blob = (out / f"{NAME}.msgpack").read_bytes()
    variables = jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, jnp.float64), flax.serialization.msgpack_restore(blob)
    )

    def array(a):
        return np.asarray(a["data"], np.float64).reshape(a["shape"])

    x, w = array(fields["x"]), array(fields["w"])
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
    out32 = array(fields["out"])
    gaps = {}
    for name in ("grads", "kernel_grads"):
        for k, v in fields[f"{name}_f64"].items():
            a, b = array(fields[name][k]), array(v)
            gaps[k] = (float(np.max(np.abs(a - b))), float(np.max(np.abs(b))))
    worst = max(gaps, key=lambda k: gaps[k][0])
    rel = max(gaps, key=lambda k: gaps[k][0] / gaps[k][1])
    print(f"{NAME} float64: max |out - out_f64| {np.max(np.abs(out32 - np.asarray(y))):.2e} "
          f"(max |out_f64| {np.max(np.abs(np.asarray(y))):.2f}), "
          f"|loss - loss_f64| {abs(fields['loss'] - float(loss)):.2e} (loss_f64 {float(loss):.6f})")
    print(f"  max |grads - grads_f64| {gaps[worst][0]:.2e} ({worst}, whose largest |grad| is {gaps[worst][1]:.2e}); "
          f"relative to a leaf's largest |grad| at most {gaps[rel][0] / gaps[rel][1]:.2e} ({rel})")
    write_json(path, fields)
    print(f"  {path}: {path.stat().st_size} bytes")


def main():
    args = [a for a in sys.argv[1:] if a != F64]
    out = pathlib.Path(args[0]) if args else FIXTURES
    out.mkdir(parents=True, exist_ok=True)
    if F64 in sys.argv:
        bit_f64(out)
        return
    bit(out)
    subprocess.run([sys.executable, __file__, F64, str(out)], check=True)


if __name__ == "__main__":
    main()
