//! # flaxen
//!
//! Flax-style `#[compact]` models and a `jax.lax.scan`-style fixed K-step
//! training loop on [dfdx], with every shape checked at compile time, on
//! stable Rust, on the CPU and on dfdx's CUDA device.
//!
//! Start with `use flaxen::prelude::*;`.
//!
//! The language of `#[compact]` and `scan!` (every layer and op with its
//! Flax arguments, shapes, names and errors) is described in full in
//! `docs/language.md`.

/// Turns a Flax `@nn.compact`-style model into a shape-checked dfdx module.
///
/// ```
/// use flaxen::prelude::*;
///
/// /// The seed CNN. Inputs are NCHW; the batch axis is implicit.
/// pub struct Cnn;
///
/// #[compact]
/// impl Cnn {
///     fn forward(x: Input<1, 28, 28>) {
///         let x = Conv(features = 32, kernel_size = (3, 3))(x);
///         let x = relu(x);
///         let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
///         let x = Conv(features = 64, kernel_size = (3, 3))(x);
///         let x = relu(x);
///         let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
///         let x = flatten(x);
///         let x = Dense(features = 256)(x);
///         let x = relu(x);
///         Dense(features = 10)(x)
///     }
/// }
///
/// let dev: Cpu = Default::default();
/// let model = dev.build_module::<Cnn, f32>();     // a `CnnModule<f32, Cpu>`
/// assert_eq!(model.num_trainable_params(), 824_458);
/// let x: Tensor<Rank4<2, 1, 28, 28>, f32, _> = dev.sample_normal();
/// let logits: Tensor<Rank2<2, 10>, f32, _> = model.forward(x);
/// ```
///
/// # The language
///
/// - `fn forward(x: Input<D1, ..>, ..)` (or `fn forward(&self, x: ..)`)
///   declares the per-example input shape: 1 to 3 integer literals, NCHW
///   for images. The batch axis is not written; the module accepts any
///   batch dimension (`Const<B>` or a run-time `usize`).
/// - Block parameters follow the input, each with its default, as a Flax
///   module's attributes: `features: Param<64>`, `rate: Param<0.1>`,
///   `use_proj: Param<true>`, `kernel: Param<{ (3, 3) }>`,
///   `padding: Param<SAME>`. They are values anywhere in the body, also as
///   `self.features` (Flax's spelling).
/// - The body is Rust syntax run by the macro when it expands: `let` and
///   `let mut` bindings, reassignment (`x = Block()(x);`, `x += y;`) and
///   shadowing, `for i in 0..n` (or `a..=b`, `_` for the index) with bounds
///   known at expansion, unrolled; `if` / `else if` / `else` and `match`
///   (literal patterns, `|`, `_`, guards) on values known at expansion,
///   decided then (only the branch taken is checked and generated); and a
///   final output expression. Values known at expansion are integers,
///   floats, booleans, tuples, `SAME` / `VALID`, block parameters, loop
///   indices and shapes: `x.shape[-1]` (axes counted from the end, since
///   the batch axis is implicit), with `+ - * / %`, comparisons, `&&`, `||`
///   and `!`. Integer arithmetic stays integer (`/` truncates, as Rust's).
/// - Layers with parameters are called as `Layer(args)(x)`, functional ops
///   as `op(x, args)`. Arguments are positional in Flax's order or `name =
///   value`, with Flax's names and defaults:
///
///   | call | per-example shapes |
///   | --- | --- |
///   | `Dense(features, use_bias = true)` | `[f]` → `[features]`, `[s, f]` → `[s, features]` |
///   | `Conv(features, kernel_size, strides = (1, 1), padding = SAME, use_bias = true)` | `[c, h, w]` → `[features, h', w']` |
///   | `Conv(.., input_dilation = 1, kernel_dilation = 1, feature_group_count = 1, ..)` (Flax's positional order) | as `Conv`, `h'`, `w'` those of the dilated kernel `(k - 1) * d + 1`; `feature_group_count` divides `c` and `features` (depthwise when it is `c`) |
///   | `ConvTranspose(features, kernel_size, strides = (1, 1), padding = SAME, kernel_dilation = 1, use_bias = true)` | `[c, h, w]` → `[features, h * sh, w * sw]` with SAME; VALID `h * sh + max(kh - sh, 0)`; explicit `(lo, hi)` pads the stride-dilated input, `(h - 1) * sh + 1 + lo + hi - kh + 1` |
///   | `avg_pool` / `max_pool(x, window_shape, strides = (1, 1), padding = VALID)` | `[c, h, w]` → `[c, h', w']` |
///   | `flatten(x)` | `[c, h, w]` → `[c*h*w]`, `[s, f]` → `[s*f]` |
///   | `reshape(x, (d1, ..))` | the same number of elements in 1 to 3 axes; one size may be `-1` (inferred); Flax's `x.reshape(..)` |
///   | `mean` / `sum(x, axis = -1)`, `axis = (-2, -1)` | those axes removed (`mean(x, axis = (-2, -1))` is global average pooling); at least one axis stays |
///   | `concatenate((x, y, ..), axis = -k)` (or `[x, y, ..]`) | equal shapes but for axis `-k`, whose sizes add up |
///   | `resize(x, (c, h2, w2), method = "nearest", antialias = true)` | `[c, h, w]` → `[c, h2, w2]`: `jax.image.resize` (half-pixel centres); `method` (required, no default) is `"nearest"`, `"linear"` (`"bilinear"`), `"cubic"` (`"bicubic"`), `"lanczos3"` or `"lanczos5"`, a string or a bare word (`method = nearest`); downsampling antialiases as jax's default does (`antialias = false` turns it off); `c` must be the input's channels; nearest by an integer factor is a copy, so no separate `upsample` |
///   | `SelfAttention(num_heads, qkv_features = f, out_features = f, dropout_rate = 0.0)(x, mask = m)` | `[s, f]` → `[s, out_features]`; `m` a `[s, s]` mask (optional); attention dropout in `forward_mut` only, one keep-mask shared by batch and heads (Flax's `broadcast_dropout`) |
///   | `MultiHeadDotProductAttention(num_heads, qkv_features = fq, out_features = fq, dropout_rate = 0.0)(q, kv, mask = m)` | `[q, fq]` and `[k, fkv]` → `[q, out_features]`; `kv` defaults to `q`; `m` a `[q, k]` mask |
///   | `Embed(num_embeddings, features)` | token ids `[s]` → `[s, features]`; an id of `num_embeddings` or more makes the call return `Err` |
///   | `make_causal_mask(x)` | `[s]` or `[s, f]` → mask `[s, s]`, query `i` sees keys `0..=i` |
///   | `make_attention_mask(q_tokens, k_tokens)` | ids `[q]`, `[k]` → mask `[q, k]`, true where both ids are non-zero (Flax's `make_attention_mask(q > 0, k > 0)`) |
///   | `combine_masks(a, b)` | masks of one shape → true where both are |
///   | `RNN(LSTMCell(features), return_carry = false, reverse = false, keep_order = false)` (also `GRUCell`, `SimpleCell`) | `[s, f]` → `[s, features]`, or the final hidden state `[features]` with `return_carry` (Flax returns it beside the outputs); the parameters are the cell's, under its name (`lstm_cell_0.ii.weight`), as in Flax |
///   | `x[i]`, `x[-1]` | `[s, ..]` → `[..]`: element `i` of the first axis (the CLS token, the last step) |
///   | `swapaxes(x, a, b)` | axes `a` and `b` (counted from the end) exchanged |
///   | `transpose(x, axes)` | output axis `k` is input axis `axes[k]`, every per-example axis once, counted from the end (`transpose(x, (-1, -2))` on `[s, f]` → `[f, s]`) |
///   | `Dropout(rate)` | unchanged; active in `forward_mut` with a tape |
///   | `BatchNorm(momentum = 0.99, epsilon = 1e-5)` | `[f]` or `[c, h, w]`, per channel; batch statistics in `forward_mut` with a tape |
///   | `LayerNorm(epsilon = 1e-6)` | `[f]` or `[s, f]`, over the last axis |
///   | `RMSNorm(epsilon = 1e-6)` | `[f]` or `[s, f]`, over the last axis |
///   | `GroupNorm(num_groups = 32, group_size, epsilon = 1e-6)` | `[c, h, w]`, per example and group of channels |
///   | `relu sigmoid tanh silu swish selu softplus log_sigmoid relu6 hard_tanh hard_sigmoid hard_silu` | unchanged |
///   | `leaky_relu(x, negative_slope = 0.01)`, `elu(x, alpha = 1.0)` | unchanged |
///   | `gelu(x, approximate = true)` | unchanged; Flax's default tanh approximation, `approximate = false` the erf form |
///   | `softmax` / `log_softmax(x, axis = -1)` | unchanged; `axis` counted from the end (the batch axis is not written) |
///   | `remat(Block(..))(x)`, `remat(Dense(..))(x)` | those of the call without `remat`, and its names and keys; the block's activations are recomputed in the backward pass (Flax's `nn.remat`, `jax.checkpoint`); refused on a block that applies `Dropout` |
///   | `x + y`, `x - y`, `x * y`, `x / y`, `-x` | equal shapes |
///   | `x * 0.5`, `1.0 - x`, `x / 2.0` | a tensor and a number |
///
///   Padding is `SAME` (XLA's split), `VALID`, `p`, `(ph, pw)` or
///   `((top, bottom), (left, right))`; sizes, kernels and strides are an
///   integer or an `(h, w)` pair.
///
/// A ResNet stage as Flax's ImageNet example writes it, with a loop over
/// blocks and a projection shortcut decided by an `if`:
///
/// ```
/// use flaxen::prelude::*;
///
/// pub struct Stage;
///
/// #[compact]
/// impl Stage {
///     fn forward(x: Input<16, 16, 16>, features: Param<32>, blocks: Param<2>, strides: Param<2>) {
///         let mut x = x;
///         for i in 0..blocks {
///             let s = if i == 0 { strides } else { 1 };
///             let y = Conv(features = features, kernel_size = (3, 3), strides = (s, s), use_bias = false)(x);
///             let y = relu(BatchNorm()(y));
///             let y = BatchNorm()(Conv(features, (3, 3), use_bias = false)(y));
///             let r = if s != 1 || x.shape[-3] != features {
///                 BatchNorm()(Conv(features, (1, 1), strides = (s, s), use_bias = false)(x))
///             } else {
///                 x
///             };
///             x = relu(r + y);
///         }
///         x
///     }
/// }
///
/// let dev: Cpu = Default::default();
/// let m = dev.build_module::<Stage, f32>();
/// // Flax's count: convolutions without biases, BatchNorm scale and bias.
/// assert_eq!(m.num_trainable_params(), 16 * 32 * 9 + 32 * 32 * 9 * 3 + 16 * 32 + 5 * 64);
/// let y: Tensor<Rank4<2, 32, 8, 8>, f32, _> = m.forward(dev.sample_normal::<Rank4<2, 16, 16, 16>>());
/// ```
///
/// # Several inputs: token ids and masks
///
/// `fn forward(x: Input<..>, ..)` may declare several inputs, each `Input<..>`
/// (floats), `Tokens<s>` (token ids, `usize`) or `Mask<q, k>` (`bool`, true
/// where a query may look at a key); the module then takes a tuple in
/// declaration order, `model.forward((x, mask))`. The gradient tape rides on
/// the first input (dfdx's convention), which is therefore data, not a mask;
/// the other float and token inputs get a tape of their own inside the
/// model, so the layers that read them record their parameters' gradients.
///
/// ```
/// use flaxen::prelude::*;
///
/// pub struct Classifier;
///
/// #[compact]
/// impl Classifier {
///     fn forward(tokens: Tokens<16>) {
///         let mask = make_attention_mask(tokens, tokens);
///         let x = Embed(num_embeddings = 1000, features = 64)(tokens);
///         let x = SelfAttention(num_heads = 4)(x, mask = mask);
///         Dense(2)(x[0]) // the CLS token
///     }
/// }
///
/// let dev: Cpu = Default::default();
/// let m = dev.build_module::<Classifier, f32>();
/// let tokens: Tensor<Rank2<2, 16>, usize, _> = dev.zeros();
/// let _: Tensor<Rank2<2, 2>, f32, _> = m.forward(tokens);
/// ```
///
/// A nested model with several inputs is called with them positionally,
/// `Block(..)(x, mask)`.
///
/// # Nested models
///
/// A `#[compact]` model of the same crate is called as a layer of another,
/// `Block(args)(x)`, its parameters given positionally (in declaration
/// order) or by name. As a Flax module adapts to its input, a nested model
/// is instantiated for the shape of `x` and the given values (the declared
/// `Input<..>` is the shape it has when built on its own):
///
/// ```
/// use flaxen::prelude::*;
///
/// pub struct ResBlock;
///
/// #[compact]
/// impl ResBlock {
///     // Parameters follow the input, each with the default used when
///     // the model is built on its own or called without arguments.
///     fn forward(x: Input<8, 8, 8>, features: Param<8>, kernel: Param<3>) {
///         let h = relu(Conv(features, kernel)(x));
///         x + Conv(features, kernel)(h)
///     }
/// }
///
/// pub struct Net;
///
/// #[compact]
/// impl Net {
///     fn forward(x: Input<1, 16, 16>) {
///         let x = Conv(32, 3)(x);
///         let x = ResBlock(features = 32)(x);            // field `res_block_0`
///         let x = ResBlock(features = 32, kernel = 5)(x); // field `res_block_1`
///         Dense(10)(flatten(max_pool(x, (2, 2), strides = (2, 2))))
///     }
/// }
///
/// let dev: Cpu = Default::default();
/// let m = dev.build_module::<Net, f32>();
/// let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(dev.sample_normal::<Rank4<2, 1, 16, 16>>());
/// ```
///
/// The expansion of one model cannot see another item, so each model also
/// defines a hidden `macro_rules!` under its own name that hands its source
/// to the models that nest it; the nested model is then checked again for
/// the call, and every shape stays known to the macro. A nested model's
/// parameters are keys under its field (`res_block_0.conv_1.weight`). A
/// CamelCase name that is neither a flaxen word, nor close to one, nor a
/// Flax or PyTorch layer name is taken to be such a model; when there is
/// none, rustc reports that it cannot find the macro of that name.
///
/// `remat(ResBlock(features = 32))(x)` is Flax's
/// `nn.remat(ResBlock)(features=32)(x)`: the same field, keys, values and
/// gradients (bit for bit), but the block keeps only its input for the
/// backward pass, which recomputes it (`layers::Remat`), so a deep
/// network's training step holds one block's activations at a time
/// (`docs/language.md` has the details and measured figures).
///
/// # Flax habits
///
/// Mistakes a Flax user makes are compile errors at the mistake that say
/// the flaxen way: `nn.Dense` (drop the prefix), `Sequential` (write the
/// layers in order, or a loop), `deterministic=`, `use_running_average=`
/// and `train` flags (modes come from `forward` / `forward_mut`, below),
/// `x.reshape(..)` (`reshape(x, ..)`), `return`, `range(n)` (`0..n`).
/// Nothing written for NHWC compiles into another model under NCHW: a
/// channel axis written `-1` on a `[c, h, w]` value (`concatenate`,
/// `softmax` and `log_softmax`, also by default, `BatchNorm(axis = ..)`) is
/// an error that names axis -3, and an input that looks NHWC
/// (`Input<28, 28, 1>`: height and width above 4, at most 4 channels last)
/// is an error that shows the NCHW spelling; `#[nchw] x: Input<28, 28, 1>`
/// says the shape is meant.
///
/// When the macro reports an error it still emits the model's module type
/// and its trait impls (with an error type as output), so rustc reports the
/// macro's messages and nothing after them in code that uses the model.
///
/// # What is generated
///
/// For `struct Cnn`: `pub struct CnnModule<E, D>` with one public field per
/// parameterised layer, named as Flax names them, snake-cased and counted
/// per kind in construction order as Flax's autonaming does (`conv_0`,
/// `conv_1`, `dense_0`, `batch_norm_0`, `block_0` for a nested `Block`;
/// in `Dense(2)(Dense(3)(x))` the outer one is `dense_0`, since Python
/// constructs it first), counting on across loop iterations, or by a
/// `name = "head"` argument. The
/// field names are the tensor keys of checkpoints (`conv_0.weight`,
/// `dense_1.bias`, dfdx's safetensors format). `CnnModule` implements
/// `TensorCollection` (optimizers, `zero_grads`, `num_trainable_params`,
/// `reset_params`, `to_device`, safetensors save and load), `Module` and
/// `ModuleMut` for batched inputs with and without a tape, `Clone` and
/// `Debug`; `Cnn` implements `BuildOnDevice` (`dev.build_module::<Cnn, E>()`)
/// and [`Compact`](runtime::compact::Compact). The rustdoc of `CnnModule`
/// lists every layer with its output shape and parameter count.
///
/// Every intermediate shape is computed by the macro and written into the
/// generated types as `Const` dimensions, so rustc checks them again against
/// the layers' own impls.
///
/// Each layer and op call runs between the hooks of the profiler,
/// [`runtime::profile`]: while a [`Profiler`](runtime::profile::Profiler)
/// runs they record the call's forward and backward time under its field
/// name (`conv_0`, `block_0.dense_1` inside a nested model) or op name
/// (`relu_1`); otherwise each costs one relaxed atomic load. The
/// `docs/profiling.md` guide shows a training step profiled.
///
/// The layers are flaxen's runtime layers where it has them (`Conv` →
/// `layers::Conv2D`, or `layers::UnbiasedConv2D` with `use_bias = false`, pools, `flatten` → `layers::Flatten2D`, `relu` →
/// `layers::Relu`, `Dense` → `layers::Dense`, or `layers::UnbiasedDense`
/// with `use_bias = false`, all with fast CPU kernels and Flax's
/// initialisers, `BatchNorm` → `layers::BatchNorm` with Flax's running
/// statistics, `RMSNorm` → `layers::RmsNorm`, `GroupNorm` →
/// `layers::GroupNorm`, `SelfAttention` and `MultiHeadDotProductAttention` →
/// `layers::MultiHeadAttention`, `Embed` → `layers::Embed`, the masks →
/// `layers::{CausalMask, AttentionMask, CombineMasks}`, `remat(..)` →
/// `layers::Remat` around the layer, `LayerNorm` → `layers::LayerNorm`,
/// whose keys are dfdx's `LayerNorm1D`'s) and dfdx's modules otherwise
/// (`Dropout`, which already matches Flax).
///
/// # The input's gradient
///
/// Besides the input tensor, the module takes it wrapped as
/// [`NoInputGrad`](crate::prelude::NoInputGrad)`(x)`: the convolutions that
/// read the input then skip its gradient (training never reads it, and JAX
/// does not compute it unless asked); every parameter gradient is unchanged.
///
/// ```
/// use flaxen::prelude::*;
///
/// pub struct Net;
///
/// #[compact]
/// impl Net {
///     fn forward(x: Input<1, 8, 8>) {
///         let x = relu(Conv(4, 3)(x));
///         Dense(2)(flatten(x))
///     }
/// }
///
/// let dev: Cpu = Default::default();
/// let m = dev.build_module::<Net, f32>();
/// let x: Tensor<Rank4<2, 1, 8, 8>, f32, _> = dev.sample_normal();
/// let grads = m.forward(NoInputGrad(x.trace(m.alloc_grads()))).mean().backward();
/// let _ = grads.get(&m.conv_0.weight);
/// ```
///
/// # Training and inference
///
/// Flax passes `train` / `deterministic` / `use_running_average` flags; dfdx,
/// and so flaxen, picks the mode from the call. A model with `Dropout` or
/// `BatchNorm` trains in `forward_mut` on an input with a tape (elements
/// dropped and scaled by `1 / (1 - rate)`; batch statistics, running
/// averages updated) and infers in `forward` on an input without one. The
/// other two combinations do not compile for such a model, so a training
/// step cannot silently run in inference mode:
///
/// ```
/// use flaxen::prelude::*;
///
/// pub struct Net;
///
/// #[compact]
/// impl Net {
///     fn forward(x: Input<8>) {
///         let x = relu(BatchNorm()(Dense(16)(x)));
///         Dense(2)(Dropout(0.5)(x))
///     }
/// }
///
/// let dev: Cpu = Default::default();
/// let mut m = dev.build_module::<Net, f32>();
/// let x: Tensor<Rank2<4, 8>, f32, _> = dev.sample_normal();
/// let grads = m.alloc_grads();
/// let y = m.forward_mut(x.clone().traced(grads)); // training
/// let _ = y.square().mean().backward();
/// let y = m.forward(x); // inference: running statistics, no dropout
/// # let _ = y;
/// ```
///
/// # Errors
///
/// Mistakes are compile errors at the call they concern, several at once
/// when they are independent:
///
/// ```text
/// error: `Dense` needs a [features] input, but `x` has shape [64, 7, 7] here
///        help: call `flatten(x)` first
///   --> src/main.rs:10:17
///    |
/// 10 |         let x = Dense(features = 10)(x);
///    |                 ^^^^^^^^^^^^^^^^^^^^^^^
/// ```
///
/// ```compile_fail
/// use flaxen::prelude::*;
/// pub struct Mlp;
/// #[compact]
/// impl Mlp {
///     fn forward(x: Input<784>) {
///         Desne(10)(x) // error: unknown layer `Desne`; did you mean `Dense(..)(x)`?
///     }
/// }
/// ```
pub use flaxen_macros::compact;
pub use flaxen_macros::scan;
pub use flaxen_runtime as runtime;
pub use flaxen_runtime::dfdx;
pub use flaxen_runtime::dist;
pub use flaxen_runtime::interop;

/// What a program that defines, trains and saves a model needs in scope.
///
/// ```
/// use flaxen::prelude::*;
/// ```
///
/// The list is deliberate, in four parts:
///
/// - **The DSL:** [`compact`] and [`scan`]. (`Input<..>`, `Tokens<..>`,
///   `Mask<..>` and `Param<..>` are syntax that `#[compact]` reads, not
///   Rust items, so nothing is imported for them.)
/// - **Tensors and devices** from dfdx: [`Tensor`](dfdx::tensor::Tensor),
///   the shapes `Rank0`–`Rank5` (`Rank5` holds a `scan!` stack of image
///   batches), [`Const`](dfdx::shapes::Const) and the
///   shape traits, the devices ([`AutoDevice`](dfdx::tensor::AutoDevice),
///   [`Cpu`](dfdx::tensor::Cpu), `Cuda` with the `cuda` feature), the tape
///   types, the traits whose methods a training program calls (building a
///   module, `forward`/`forward_mut`, creating and reading tensors,
///   `trace`/`backward`, reductions, reshapes, `zero_grads`,
///   `num_trainable_params`, safetensors save/load).
/// - **Training:** [`TrainState`](runtime::train_state::TrainState) and
///   [`Loss`](runtime::train_state::Loss), the Optax-style optimizers and
///   schedules, the losses, [`Metrics`](runtime::metrics::Metrics), and
///   [`NoInputGrad`](runtime::layers::NoInputGrad), which tells a model
///   that its input needs no gradient.
/// - **Data, checkpoints, logging:** the loader, checkpoints, the metrics
///   logger and progress bar, the NaN/Inf guard, and their error types.
///
/// Not in it, on purpose: dfdx's own optimizers and layer builders (use
/// [`flaxen::dfdx`](dfdx) for them, so `Adam` and [`adam`](runtime::optim::adam)
/// never meet in one scope), flaxen's kernels and layer modules
/// ([`flaxen::runtime::layers`](runtime::layers)), the embedded data set
/// ([`flaxen::runtime::data::digits`](runtime::data::digits)) and the
/// items generated code uses.
pub mod prelude {
    pub use flaxen_macros::{compact, scan};

    pub use flaxen_runtime::dfdx::nn::{
        BuildModule, BuildOnDevice, DeviceBuildExt, LoadFromSafetensors, Module, ModuleMut,
        NumParams, ResetParams, SaveToSafetensors, TensorCollection, ToDevice, ToDtype, ZeroGrads,
    };
    pub use flaxen_runtime::dfdx::shapes::{
        Axis, Const, ConstShape, Dim, Dtype, HasShape, Rank0, Rank1, Rank2, Rank3, Rank4, Rank5,
        Shape,
    };
    #[cfg(feature = "cuda")]
    pub use flaxen_runtime::dfdx::tensor::Cuda;
    pub use flaxen_runtime::dfdx::tensor::{
        AsArray, AutoDevice, Cpu, Gradients, HasErr, NoneTape, OnesTensor, OwnedTape, PutTape,
        SampleTensor, Tape, Tensor, TensorFrom, TensorFromVec, Trace, WithEmptyTape, ZerosTensor,
    };
    pub use flaxen_runtime::dfdx::tensor_ops::{
        Backward, BroadcastTo, Device, MaxTo, MeanTo, PermuteTo, ReshapeTo, SelectTo, SumTo,
        TryMatMul,
    };

    pub use flaxen_runtime::checkpoint::{Checkpoint, CheckpointError, CheckpointManager};
    pub use flaxen_runtime::data::{
        ArrayDataset, DataError, Dataset, Loader, LoaderConfig, LoaderState,
    };
    pub use flaxen_runtime::guard::{check_finite, GuardError};
    pub use flaxen_runtime::layers::NoInputGrad;
    pub use flaxen_runtime::logging::{LoggingError, MetricsLogger, Progress};
    pub use flaxen_runtime::losses::{
        mse, sigmoid_binary_cross_entropy, softmax_cross_entropy,
        softmax_cross_entropy_with_integer_labels, squared_error,
    };
    pub use flaxen_runtime::metrics::Metrics;
    pub use flaxen_runtime::optim::{
        adabelief, adafactor, adagrad, adam, adamw, add_decayed_weights, apply_if_finite,
        apply_updates, chain, clip_by_global_norm, decay_mask, identity, lamb, lion, masked,
        multi_steps, multi_transform, rmsprop, scale, scale_by_schedule, set_to_zero, sgd,
        GradientTransformation, OptimError,
    };
    pub use flaxen_runtime::scan::stack_batches;
    pub use flaxen_runtime::schedule::{
        constant, cosine_decay, exponential_decay, linear, piecewise_constant, warmup_cosine_decay,
        Schedule,
    };
    pub use flaxen_runtime::state::{StateDict, StateError, StateMap};
    pub use flaxen_runtime::train_state::{Loss, TrainState};
}

/// The profiling guide, `docs/profiling.md`, whose examples run as
/// doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/profiling.md")]
pub struct ProfilingGuide;

/// Paths used by code that the macros generate. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use ::core;
    pub use flaxen_macros::__compact_resume as compact_resume;
    pub use flaxen_runtime;
    pub use flaxen_runtime::dfdx;
}

/// The language reference, `docs/language.md`, whose examples run as
/// doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/language.md")]
pub struct LanguageReference;
