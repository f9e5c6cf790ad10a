"""Writes the fixtures of tests/flax_ports.rs: Flax checkpoints of three
models as their public sources define them, saved exactly as
`flax.serialization.to_bytes(variables)` returns them, with their outputs,
gradients and (for BatchNorm) the batch statistics one training step
leaves.

    /tmp/venv/bin/python tests/python/make_flax_ports.py [OUTDIR]

writes into tests/fixtures/, or into OUTDIR to compare a fresh run with the
committed files. jax 0.10.2, jaxlib 0.10.2, flax 0.12.8, numpy 2.4.6,
msgpack 1.2.4 made the committed files (Python 3.11; requirements.txt).

The models are retyped here from their sources (same classes, attributes,
defaults, submodule names and call order), keeping only what is needed:

- `ResNetBlock`, `ResNet`, `ResNet18` of google/flax
  examples/imagenet/models.py (linen version). Dropped: `dtype` (float32
  throughout; also the final `jnp.asarray(x, dtype)`), and the
  `BottleneckResNetBlock` and other depths, unused here.
- `ActorCritic` of google/flax examples/ppo/models.py. Dropped: the
  `dtype=jnp.float32` given to every layer (float32 is the default).
- `MlpBlock`, `MixerBlock`, `MlpMixer` of google-research/vision_transformer
  vit_jax/models_mixer.py (the current version: token mixing through
  `swapaxes` and an `MlpBlock` named `token_mixing`). Dropped:
  `model_name` (unused by the forward), `einops.rearrange(x, 'n h w c ->
  n (h w) c')`, written as the same row-major reshape, and the
  `ml_collections` ConfigDict of `patches`, replaced by a frozen dataclass
  with the same `size` field. `num_classes` is nonzero, so `head` is
  always there.

Every model is initialised from a fixed `PRNGKey`, then every leaf is
perturbed from a seeded numpy generator by `fixture_out.perturb`: params
`p + 0.1 * N(0, 1)` (so the zero-initialised `head`, zero biases and
zero-init BatchNorm scales hide nothing), batch_stats `mean + 0.1 * N(0,
1)` and `var * exp(0.2 * N(0, 1))` (still positive). Everything is
float32.

In each JSON: "x", the input in flaxen's layout (images NCHW, transposed
to NHWC here before Flax sees them); "out", the output in inference mode
(BatchNorm on its running averages, `train=False`); "w", a fixed standard
normal array of the output's shape; "loss" = sum(out_train * w), with
out_train the output in training mode (BatchNorm on the batch's statistics,
`mutable=["batch_stats"]`); "grads", d loss / d params keyed by the Flax
path joined with "/" and collection first ("params/conv_init/kernel"), in
Flax's own layout (HWIO conv kernels, (in, out) dense kernels); for models
with BatchNorm, "new_batch_stats", the batch_stats after that one
training-mode forward, keyed "batch_stats/<path>"; "paths", the sorted "/"
paths of every leaf of the saved msgpack; "num_params", the number of
elements of the "params" leaves (batch_stats not counted). Arrays are
`{"shape": [...], "data": [flat row-major]}` (`flax_keys.arr`).

Flax's "SAME" padding (nn.Conv's default, and the pools' when asked) is
lax's: along each spatial axis out = ceil(in / stride), total padding
max((out - 1) * stride + kernel - in, 0), low side total // 2, high side
the rest, so an even total splits evenly and an odd one puts the extra row
at the bottom/right. The padding of every conv and pool below is printed
by this script as it runs.

1. flax_port_resnet18.{msgpack,json}: `ResNet18(num_classes=10,
   num_filters=4)` (the source's ResNet18: stage_sizes [2, 2, 2, 2],
   ResNetBlock; 4 filters rather than 8 keeps the JSON's gradients under
   1.5 MB), convs without bias, BatchNorm momentum 0.9, epsilon 1e-5.
   conv_init 7x7 stride 2 padding (3, 3) on both axes, bn_init, relu,
   max_pool 3x3 stride 2 "SAME" (padding by -inf: (0, 1) from 32 to 16),
   eight blocks `ResNetBlock_0` .. `ResNetBlock_7` (widths 4, 4, 8, 8, 16,
   16, 32, 32; the first block of stages 2-4 has stride 2), mean over H and
   W, `Dense_0`. In a block: `Conv_0` 3x3 (with the block's stride),
   `BatchNorm_0`, relu, `Conv_1` 3x3, `BatchNorm_1` (zero-init scale),
   and where the shape changes `conv_proj` 1x1 with the stride and
   `norm_proj` on the residual; relu(residual + y). Every 3x3 conv is
   "SAME": (1, 1) at stride 1, (0, 1) at stride 2 on these even sizes (16
   -> 8, 8 -> 4, 4 -> 2); the strided 1x1 projection is "SAME" with zero
   padding (it takes the even rows and columns). BatchNorm in training
   mode normalises with the biased batch variance (over N, H, W) and
   updates mean <- 0.9 mean + 0.1 batch_mean, var <- 0.9 var + 0.1
   batch_var, with that same biased variance (no n / (n - 1)). Images are
   64x64, so the last stage's maps are 2x2 (its BatchNorms see 8 values
   per channel; at 1x1 they would see 2, and float32 rounding of the
   gradients grows to 1e-3). JSON: "x" [2, 3, 64, 64], "out" [2, 10],
   "out_train" [2, 10], "w", "loss", "grads", "new_batch_stats", and the
   float64 run's "out_train_f64", "grads_f64", "new_batch_stats_f64"
   (`resnet18_f64`, in a second process of its own, `fixture_out.main_f64`,
   since `jax_enable_x64` is process-wide).

2. flax_port_actor_critic.{msgpack,json}: `ActorCritic(num_outputs=6)`:
   x.astype(float32) / 255, then `conv1` 8x8 stride 4, relu, `conv2` 4x4
   stride 2, relu, `conv3` 3x3 stride 1, relu (all with bias, all "SAME"),
   flattened by `x.reshape((x.shape[0], -1))` in NHWC order (no
   transpose: `hidden`'s kernel rows run over (h, w, c), c fastest),
   `hidden` Dense(512), relu, then from that same hidden vector `logits`
   Dense(6) -> log_softmax and `value` Dense(1). Returns
   (policy_log_probabilities, value). Frames are FRAME x FRAME (20; the
   source's Atari frames are 84 x 84, which only grows `hidden`'s kernel:
   20 keeps every conv's padding, conv1 (2, 2) to 5x5, conv2 (1, 2) to
   3x3, conv3 (1, 1), and `hidden` has 576 = 3 * 3 * 64 input rows).
   JSON: "x" [2, 4, 20, 20] (integers 0..255 as floats), "out_policy"
   [2, 6], "out_value" [2, 1], "w_policy", "w_value", "loss" =
   sum(out_policy * w_policy) + sum(out_value * w_value), "grads" (all but
   `params/hidden/kernel`), and of that kernel's gradient the rows
   "hidden_kernel_grad_rows" (every 19th) as "hidden_kernel_grad".

3. flax_port_mixer.{msgpack,json}: `MlpMixer(patches=Patches(size=(4,
   4)), num_classes=10, num_blocks=2, hidden_dim=16, tokens_mlp_dim=8,
   channels_mlp_dim=32)` called with `train=False` (its only flag; the
   source ignores it): `stem` Conv 4x4 stride 4 "SAME" (no padding, 16 ->
   4) with bias, reshaped NHWC [n, 4, 4, 16] -> [n, 16 tokens, 16]
   (token = h * 4 + w), then `MixerBlock_0`, `MixerBlock_1`: y =
   `LayerNorm_0`(x), swapaxes(1, 2) to [n, channels, tokens],
   `token_mixing` MlpBlock over the tokens (`Dense_0` 16 -> 8, gelu,
   `Dense_1` 8 -> 16), swapaxes back, x = x + y; x + `channel_mixing`
   MlpBlock(`LayerNorm_1`(x)) (`Dense_0` 16 -> 32, gelu, `Dense_1` 32 ->
   16). Then `pre_head_layer_norm`, mean over the tokens, `head`
   Dense(10) (zero kernel init, perturbed here). gelu is `nn.gelu`'s
   default, the tanh approximation; every LayerNorm has Flax's epsilon
   1e-6. JSON: "x" [2, 3, 16, 16], "out" [2, 10], "w", "loss", "grads".
"""

import dataclasses
from functools import partial
from typing import Any, Callable, Sequence, Tuple

from fixture_out import enable_x64_in_f64_pass, main_f64, normal, perturb, save

# The float64 reference pass (see `resnet18_f64`) runs in a process of its
# own: `jax_enable_x64` must be set before jax is imported.
enable_x64_in_f64_pass()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from flax_keys import arr, by_path, from_arr  # noqa: E402

# ActorCritic's frames, FRAME x FRAME x 4 (the source's Atari frames are
# 84 x 84; the model itself fixes no size). The checkpoint grows with it
# (hidden's kernel has ceil(FRAME / 8)^2 * 64 rows): 84 makes a 16 MB
# msgpack; 20 gives the same paddings of every conv (conv1 (2, 2), conv2
# (1, 2), conv3 (1, 1); maps 5 x 5 then 3 x 3) and a 1.2 MB one.
FRAME = 20

ModuleDef = Any


# google/flax examples/imagenet/models.py


class ResNetBlock(nn.Module):
    """ResNet block."""

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: Tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.conv(self.filters, (3, 3), self.strides)(x)
        y = self.norm()(y)
        y = self.act(y)
        y = self.conv(self.filters, (3, 3))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)

        if residual.shape != y.shape:
            residual = self.conv(self.filters, (1, 1), self.strides, name="conv_proj")(residual)
            residual = self.norm(name="norm_proj")(residual)

        return self.act(residual + y)


class ResNet(nn.Module):
    """ResNetV1."""

    stage_sizes: Sequence[int]
    block_cls: ModuleDef
    num_classes: int
    num_filters: int = 64
    act: Callable = nn.relu
    conv: ModuleDef = nn.Conv

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, use_bias=False)
        norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5)

        x = conv(self.num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], name="conv_init")(x)
        x = norm(name="bn_init")(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, block_size in enumerate(self.stage_sizes):
            for j in range(block_size):
                strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                x = self.block_cls(
                    self.num_filters * 2**i, strides=strides, conv=conv, norm=norm, act=self.act
                )(x)
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dense(self.num_classes)(x)
        return x


ResNet18 = partial(ResNet, stage_sizes=[2, 2, 2, 2], block_cls=ResNetBlock)


# google/flax examples/ppo/models.py


class ActorCritic(nn.Module):
    """Class defining the actor-critic model."""

    num_outputs: int

    @nn.compact
    def __call__(self, x):
        dtype = jnp.float32
        x = x.astype(dtype) / 255.0
        x = nn.Conv(features=32, kernel_size=(8, 8), strides=(4, 4), name="conv1")(x)
        x = nn.relu(x)
        x = nn.Conv(features=64, kernel_size=(4, 4), strides=(2, 2), name="conv2")(x)
        x = nn.relu(x)
        x = nn.Conv(features=64, kernel_size=(3, 3), strides=(1, 1), name="conv3")(x)
        x = nn.relu(x)
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=512, name="hidden")(x)
        x = nn.relu(x)
        logits = nn.Dense(features=self.num_outputs, name="logits")(x)
        policy_log_probabilities = nn.log_softmax(logits)
        value = nn.Dense(features=1, name="value")(x)
        return policy_log_probabilities, value


# google-research/vision_transformer vit_jax/models_mixer.py


@dataclasses.dataclass(frozen=True)
class Patches:
    """Stands for the `ml_collections.ConfigDict` of the source's config:
    the model reads only `patches.size`."""

    size: Tuple[int, int]


class MlpBlock(nn.Module):
    mlp_dim: int

    @nn.compact
    def __call__(self, x):
        y = nn.Dense(self.mlp_dim)(x)
        y = nn.gelu(y)
        return nn.Dense(x.shape[-1])(y)


class MixerBlock(nn.Module):
    """Mixer block layer."""

    tokens_mlp_dim: int
    channels_mlp_dim: int

    @nn.compact
    def __call__(self, x):
        y = nn.LayerNorm()(x)
        y = jnp.swapaxes(y, 1, 2)
        y = MlpBlock(self.tokens_mlp_dim, name="token_mixing")(y)
        y = jnp.swapaxes(y, 1, 2)
        x = x + y
        y = nn.LayerNorm()(x)
        return x + MlpBlock(self.channels_mlp_dim, name="channel_mixing")(y)


class MlpMixer(nn.Module):
    """Mixer architecture."""

    patches: Any
    num_classes: int
    num_blocks: int
    hidden_dim: int
    tokens_mlp_dim: int
    channels_mlp_dim: int

    @nn.compact
    def __call__(self, inputs, *, train):
        del train
        x = nn.Conv(self.hidden_dim, self.patches.size, strides=self.patches.size, name="stem")(inputs)
        n, h, w, c = x.shape
        x = jnp.reshape(x, (n, h * w, c))  # einops 'n h w c -> n (h w) c'
        for _ in range(self.num_blocks):
            x = MixerBlock(self.tokens_mlp_dim, self.channels_mlp_dim)(x)
        x = nn.LayerNorm(name="pre_head_layer_norm")(x)
        x = jnp.mean(x, axis=1)
        if self.num_classes:
            x = nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros, name="head")(x)
        return x


# flaxen's NCHW images to Flax's NHWC, and the padding printed.


def nhwc(x):
    return jnp.asarray(np.transpose(x, (0, 2, 3, 1)))


def same_padding(size, kernel, stride):
    """lax's "SAME" along one axis: (out, (low, high))."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, (total // 2, total - total // 2)


def print_paddings(title, layers, size):
    """Prints the padding of a chain of (name, kernel, stride, padding)
    square layers on a square input of `size`."""
    print(f"{title}:")
    for layer, kernel, stride, padding in layers:
        if padding == "SAME":
            out, pad = same_padding(size, kernel, stride)
        else:
            pad = padding
            out = (size + sum(pad) - kernel) // stride + 1
        print(f"  {layer}: {kernel}x{kernel} stride {stride} {padding}: {size} -> {out}, padding {pad}")
        size = out


# The fixtures.


def resnet18(out):
    rng = np.random.default_rng(20261221)
    model = ResNet18(num_classes=10, num_filters=4)
    x = normal(rng, (2, 3, 64, 64))
    w = normal(rng, (2, 10))
    variables = perturb(model.init(jax.random.PRNGKey(21), nhwc(x), train=False), rng)
    assert set(variables) == {"params", "batch_stats"}

    y = model.apply(variables, nhwc(x), train=False)

    def loss_fn(params):
        y, updates = model.apply(
            {"params": params, "batch_stats": variables["batch_stats"]},
            nhwc(x), train=True, mutable=["batch_stats"],
        )
        return jnp.sum(y * w), (y, updates["batch_stats"])

    (loss, (y_train, new_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    print_paddings("flax_port_resnet18", [
        ("conv_init", 7, 2, [3, 3]), ("max_pool", 3, 2, "SAME"),
        ("stage 1 convs", 3, 1, "SAME"),
        ("stage 2 Conv_0", 3, 2, "SAME"), ("stage 3 Conv_0", 3, 2, "SAME"), ("stage 4 Conv_0", 3, 2, "SAME"),
    ], 64)
    for size in (16, 8, 4):
        o, pad = same_padding(size, 1, 2)
        print(f"  conv_proj 1x1 stride 2 SAME: {size} -> {o}, padding {pad}")
    save(out, "flax_port_resnet18", variables, {
        "x": arr(x),
        "out": arr(y),
        "out_train": arr(y_train),
        "w": arr(w),
        "loss": float(loss),
        "grads": by_path(grads, "params"),
        "new_batch_stats": by_path(new_stats, "batch_stats"),
    })


def actor_critic(out):
    rng = np.random.default_rng(20261222)
    model = ActorCritic(num_outputs=6)
    x = np.round(rng.uniform(0.0, 255.0, (2, 4, FRAME, FRAME))).astype(np.float32)
    w_policy = normal(rng, (2, 6))
    w_value = normal(rng, (2, 1))
    variables = perturb(model.init(jax.random.PRNGKey(22), nhwc(x)), rng)
    assert set(variables) == {"params"}

    def loss_fn(variables):
        policy, value = model.apply(variables, nhwc(x))
        return jnp.sum(policy * w_policy) + jnp.sum(value * w_value), (policy, value)

    (loss, (policy, value)), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables)
    print_paddings("flax_port_actor_critic", [
        ("conv1", 8, 4, "SAME"), ("conv2", 4, 2, "SAME"), ("conv3", 3, 1, "SAME"),
    ], FRAME)
    grads = by_path(grads["params"], "params")
    # hidden's kernel gradient has 576 x 512 values; every 19th of its
    # (h, w, c) rows (31 rows, as many channels, positions all over the
    # 3 x 3 map) keeps the JSON small and still pins the flatten order.
    full = np.asarray(grads.pop("params/hidden/kernel")["data"], np.float32).reshape(-1, 512)
    rows = list(range(0, full.shape[0], 19))
    save(out, "flax_port_actor_critic", variables, {
        "x": arr(x),
        "out_policy": arr(policy),
        "out_value": arr(value),
        "w_policy": arr(w_policy),
        "w_value": arr(w_value),
        "loss": float(loss),
        "grads": grads,
        "hidden_kernel_grad_rows": rows,
        "hidden_kernel_grad": arr(full[rows]),
    })


def mixer(out):
    rng = np.random.default_rng(20261223)
    model = MlpMixer(
        patches=Patches(size=(4, 4)), num_classes=10, num_blocks=2, hidden_dim=16,
        tokens_mlp_dim=8, channels_mlp_dim=32,
    )
    x = normal(rng, (2, 3, 16, 16))
    w = normal(rng, (2, 10))
    variables = perturb(model.init(jax.random.PRNGKey(23), nhwc(x), train=False), rng)
    assert set(variables) == {"params"}

    def loss_fn(variables):
        y = model.apply(variables, nhwc(x), train=False)
        return jnp.sum(y * w), y

    (loss, y), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables)
    print_paddings("flax_port_mixer", [("stem", 4, 4, "SAME")], 16)
    save(out, "flax_port_mixer", variables, {
        "x": arr(x),
        "out": arr(y),
        "w": arr(w),
        "loss": float(loss),
        "grads": by_path(grads["params"], "params"),
    })


def resnet18_f64(fields, variables):
    """Adds to flax_port_resnet18.json's fields the training call of the
    same model in float64, on the float32 checkpoint's values widened
    (`variables`): "out_train_f64", "grads_f64", "new_batch_stats_f64":
    the reference gradients are held to. Flax's own float32 gradients are
    within 2.1e-5 of them on these 64x64 images; on 32x32 ones (the last
    stage's BatchNorms normalising 2 values each) they were 3e-3 off."""
    model = ResNet18(num_classes=10, num_filters=4)
    x, w = from_arr(fields["x"]), from_arr(fields["w"])

    def loss_fn(params):
        y, updates = model.apply(
            {"params": params, "batch_stats": variables["batch_stats"]},
            nhwc(x), train=True, mutable=["batch_stats"],
        )
        return jnp.sum(y * w), (y, updates["batch_stats"])

    (_, (y_train, new_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
    assert y_train.dtype == jnp.float64
    fields["out_train_f64"] = arr(y_train)
    fields["grads_f64"] = by_path(grads, "params")
    fields["new_batch_stats_f64"] = by_path(new_stats, "batch_stats")


def write(out):
    """The three fixtures, in float32."""
    resnet18(out)
    actor_critic(out)
    mixer(out)


if __name__ == "__main__":
    main_f64(__file__, write, "flax_port_resnet18", resnet18_f64)
