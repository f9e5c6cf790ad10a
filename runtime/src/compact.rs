//! Support for the code that `#[compact]` generates.
//!
//! Users rarely name anything here directly: the macro implements [`Compact`]
//! for every model type and calls the functional ops below. The items are
//! public (and documented) because generated code in the user's crate must
//! reach them, and because [`Compact`] describes a model to generic code.

use dfdx::prelude::{
    Device, Dtype, NoneTape, Shape, Tape, Tensor, TryAdd, TryMul, TrySub, WithEmptyTape,
};
use dfdx::tensor::Storage;

/// What a `#[compact]` model type publishes about itself.
///
/// Every model's per-example input and output shapes and its parameter
/// count, as associated consts usable in const-generic arguments of concrete
/// types (`Const<{ <Block as Compact>::OUT_0 }>` is legal on stable Rust).
/// The macro itself instantiates nested models from their source, so it
/// knows their shapes; when it cannot (a model given only by these consts),
/// it writes such arguments and checks them with `const` assertions.
///
/// Shapes are per example (the batch axis is not counted). Ranks are at most
/// 4; unused dimensions are `0`.
///
/// `#[compact]` implements it (see `flaxen::compact`); generic code can read
/// a model's shapes from it:
///
/// ```
/// use flaxen_runtime::compact::Compact;
///
/// /// `[c, h, w]` of an image model's input.
/// fn image_input<M: Compact>() -> Option<[usize; 3]> {
///     (M::IN_RANK == 3).then_some([M::IN_0, M::IN_1, M::IN_2])
/// }
/// ```
pub trait Compact {
    /// The built module (`MlpModule<E, D>` for `Mlp`).
    type Module<E: Dtype, D: Storage<E>>;
    /// Rank of the per-example input.
    const IN_RANK: usize;
    /// First input dimension.
    const IN_0: usize;
    /// Second input dimension (0 when absent).
    const IN_1: usize;
    /// Third input dimension (0 when absent).
    const IN_2: usize;
    /// Fourth input dimension (0 when absent).
    const IN_3: usize;
    /// Rank of the per-example output.
    const OUT_RANK: usize;
    /// First output dimension.
    const OUT_0: usize;
    /// Second output dimension (0 when absent).
    const OUT_1: usize;
    /// Third output dimension (0 when absent).
    const OUT_2: usize;
    /// Fourth output dimension (0 when absent).
    const OUT_3: usize;
    /// Number of trainable parameters, nested models included.
    const NUM_PARAMS: usize;
}

/// The floating-point types a compact model can be built with: the bounds
/// dfdx's own `Linear` puts on its dtype for initialisation.
pub trait ParamDtype: Dtype + num_traits::Float + rand_distr::uniform::SampleUniform {}

impl<E: Dtype + num_traits::Float + rand_distr::uniform::SampleUniform> ParamDtype for E {}

/// `silu(x) = x * sigmoid(x)` (Flax's `nn.silu`, also called swish).
///
/// dfdx 0.13 has no silu; this composes two of its differentiable ops, so
/// gradients flow through both uses of `x`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::try_silu;
///
/// let dev: Cpu = Default::default();
/// let y = try_silu(dev.tensor([0.0f32, 1.0])).unwrap();
/// assert!((y.array()[1] - 0.731_058_6).abs() < 1e-6);
/// ```
pub fn try_silu<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    // The sigmoid branch gets an empty tape and the product merges both
    // tapes back, the same idiom dfdx's `Residual` uses for a reused input.
    let s = x.with_empty_tape().try_sigmoid()?;
    x.try_mul(s)
}

/// Flax's `gelu(x, approximate=False)`: `x * Φ(x)` with `Φ` the standard
/// normal CDF (the erf form; the DSL's plain `gelu` is the tanh
/// approximation, Flax's default).
///
/// dfdx 0.13's `accurate_gelu` computes this value, but on both devices its
/// gradient is `Φ(x) + √2·x·φ(x)` instead of `Φ(x) + x·φ(x)` (`φ` the normal
/// density): it drops the `1/√2` of `erf(x/√2)`'s derivative. This adds
/// `(√2 - 1)·(φ(x) - φ̄(x))`, where `φ̄` is the same tensor off the tape:
/// exactly zero in value, `-(√2 - 1)·x·φ(x)` in gradient, which cancels the
/// surplus. `tests/fixtures/flax_norm_act.json` holds it to Flax's values
/// and gradients.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::try_gelu_exact;
///
/// let dev: Cpu = Default::default();
/// let x: Tensor<Rank1<1>, f64, _> = dev.tensor([1.0]);
/// let y = try_gelu_exact(x.leaky_trace()).unwrap();
/// assert!((y.array()[0] - 0.841_344_746_068_543).abs() < 1e-12); // 1 * Φ(1)
/// let g = y.sum().backward();
/// // Φ(1) + φ(1)
/// assert!((g.get(&x).array()[0] - 1.083_315_470_587_686).abs() < 1e-12);
/// ```
pub fn try_gelu_exact<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    /// `φ(t)`, on `t`'s tape.
    fn density<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
        t: Tensor<S, E, D, T>,
    ) -> Result<Tensor<S, E, D, T>, D::Err> {
        t.try_square()?
            .try_mul(E::from_f64(-0.5).unwrap_or_default())?
            .try_exp()?
            .try_mul(E::from_f64(1.0 / (2.0 * std::f64::consts::PI).sqrt()).unwrap_or_default())
    }
    // Computed twice rather than copied: dfdx's binary ops need two tensors
    // with distinct ids. The same ops on the same values give the same bits.
    let on_tape = density(x.with_empty_tape())?;
    let off_tape = density(x.retaped::<NoneTape>())?;
    let correction = on_tape
        .try_sub(off_tape)?
        .try_mul(E::from_f64(std::f64::consts::SQRT_2 - 1.0).unwrap_or_default())?;
    x.try_accurate_gelu()?.try_add(correction)
}

/// A float literal of the model source as the model's dtype (`x * 0.5`).
///
/// ```
/// assert_eq!(flaxen_runtime::compact::scalar::<f32>(0.5), 0.5f32);
/// ```
pub fn scalar<E: Dtype>(value: f64) -> E {
    // Every dfdx dtype is `FromPrimitive`; `None` only for out-of-range
    // values of a narrow type, where the saturated value is what a user of
    // `x * 1e9` in f16 would get from a cast too.
    E::from_f64(value).unwrap_or_else(|| {
        if value > 0.0 {
            E::from_f32(f32::MAX).unwrap_or_default()
        } else {
            E::from_f32(f32::MIN).unwrap_or_default()
        }
    })
}

/// XLA's `SAME` padding `(low, high)` for one axis: the output keeps
/// `ceil(size / stride)` elements and the smaller half of the padding goes
/// first. Used in the types of layers after a nested model, whose sizes the
/// macro cannot fold itself.
///
/// ```
/// assert_eq!(flaxen_runtime::compact::same_padding(28, 4, 1), (1, 2));
/// ```
pub const fn same_padding(size: usize, kernel: usize, stride: usize) -> (usize, usize) {
    let stride = if stride == 0 { 1 } else { stride };
    let out = size.div_ceil(stride);
    let needed = out.saturating_sub(1) * stride + kernel;
    let total = needed.saturating_sub(size);
    (total / 2, total - total / 2)
}

/// Output size of a window of `kernel` with `stride` over an axis padded by
/// `lo` and `hi`. The macro asserts beforehand that the window fits.
///
/// ```
/// assert_eq!(flaxen_runtime::compact::conv_out_size(28, 3, 1, 0, 0), 26);
/// ```
pub const fn conv_out_size(
    size: usize,
    kernel: usize,
    stride: usize,
    lo: usize,
    hi: usize,
) -> usize {
    let stride = if stride == 0 { 1 } else { stride };
    (size + lo + hi).saturating_sub(kernel) / stride + 1
}
