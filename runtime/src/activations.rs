//! Flax's activations that dfdx 0.13 lacks or gets wrong, composed from
//! its differentiable ops so that they run on every device and dtype. The
//! DSL's ops of the same names call them (`silu(x)` is [`try_silu`]);
//! `tests/fixtures/flax_norm_act.json` holds each to Flax's values and
//! gradients.
//!
//! A tensor used twice goes once with an empty tape and the ops merge the
//! tapes back, the idiom dfdx's `Residual` uses for a reused input.

use crate::dtype::scalar;
use dfdx::prelude::{
    Device, Dtype, NoneTape, Shape, Tape, Tensor, TryAdd, TryMul, TrySub, WithEmptyTape,
};

/// `silu(x) = x * sigmoid(x)` (Flax's `nn.silu`, also called swish).
///
/// dfdx 0.13 has no silu; this composes two of its differentiable ops, so
/// gradients flow through both uses of `x`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_silu;
///
/// let dev: Cpu = Default::default();
/// let y = try_silu(dev.tensor([0.0f32, 1.0])).unwrap();
/// assert!((y.array()[1] - 0.731_058_6).abs() < 1e-6);
/// ```
pub fn try_silu<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
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
/// use flaxen_runtime::activations::try_gelu_exact;
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
            .try_mul(scalar::<E>(-0.5))?
            .try_exp()?
            .try_mul(scalar::<E>(1.0 / (2.0 * std::f64::consts::PI).sqrt()))
    }
    // Computed twice rather than copied: dfdx's binary ops need two tensors
    // with distinct ids. The same ops on the same values give the same bits.
    let on_tape = density(x.with_empty_tape())?;
    let off_tape = density(x.retaped::<NoneTape>())?;
    let correction = on_tape
        .try_sub(off_tape)?
        .try_mul(scalar::<E>(std::f64::consts::SQRT_2 - 1.0))?;
    x.try_accurate_gelu()?.try_add(correction)
}

/// Flax's `nn.swish`, another name for [`try_silu`].
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::{try_silu, try_swish};
///
/// let dev: Cpu = Default::default();
/// let x = dev.tensor([-1.0f64, 2.0]);
/// assert_eq!(try_swish(x.clone()).unwrap().array(), try_silu(x).unwrap().array());
/// ```
pub fn try_swish<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    try_silu(x)
}

/// Flax's `nn.leaky_relu(x, negative_slope)`: `x` where `x >= 0`, else
/// `negative_slope * x`, as `relu(x) - negative_slope * relu(-x)`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_leaky_relu;
///
/// let dev: Cpu = Default::default();
/// let y = try_leaky_relu(dev.tensor([-2.0f64, 3.0]), 0.01).unwrap();
/// assert_eq!(y.array(), [-0.02, 3.0]);
/// ```
pub fn try_leaky_relu<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
    negative_slope: f64,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    let negative = x
        .with_empty_tape()
        .try_negate()?
        .try_relu()?
        .try_mul(scalar::<E>(negative_slope))?;
    x.try_relu()?.try_sub(negative)
}

/// Flax's `nn.elu(x, alpha)`: `x` where `x > 0`, else `alpha * (exp(x) - 1)`,
/// as `relu(x) + alpha * (exp(-relu(-x)) - 1)`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_elu;
///
/// let dev: Cpu = Default::default();
/// let y = try_elu(dev.tensor([-1.0f64, 2.0]), 1.0).unwrap().array();
/// assert!((y[0] - ((-1.0f64).exp() - 1.0)).abs() < 1e-15 && y[1] == 2.0);
/// ```
pub fn try_elu<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
    alpha: f64,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    let negative = x
        .with_empty_tape()
        .try_negate()?
        .try_relu()?
        .try_negate()?
        .try_exp()?
        .try_sub(scalar::<E>(1.0))?
        .try_mul(scalar::<E>(alpha))?;
    x.try_relu()?.try_add(negative)
}

/// Flax's `nn.selu`: `scale * elu(x, alpha)` with the self-normalising
/// constants `scale ≈ 1.0507`, `alpha ≈ 1.6733`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_selu;
///
/// let dev: Cpu = Default::default();
/// let y = try_selu(dev.tensor([1.0f64])).unwrap().array();
/// assert!((y[0] - 1.050_700_987_355_480_5).abs() < 1e-15);
/// ```
pub fn try_selu<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    const ALPHA: f64 = 1.673_263_242_354_377_284_817_042_991_671_7;
    const SCALE: f64 = 1.050_700_987_355_480_493_419_334_985_294_6;
    try_elu(x, ALPHA)?.try_mul(scalar::<E>(SCALE))
}

/// Flax's `nn.softplus`: `log(1 + exp(x))`, computed as
/// `relu(x) + log(1 + exp(-|x|))` so that it neither overflows for large `x`
/// nor loses `x` to rounding.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_softplus;
///
/// let dev: Cpu = Default::default();
/// let y = try_softplus(dev.tensor([0.0f64, 1000.0])).unwrap().array();
/// assert!((y[0] - 2.0f64.ln()).abs() < 1e-15 && y[1] == 1000.0);
/// ```
pub fn try_softplus<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    let tail = x
        .with_empty_tape()
        .try_abs()?
        .try_negate()?
        .try_exp()?
        .try_add(scalar::<E>(1.0))?
        .try_ln()?;
    x.try_relu()?.try_add(tail)
}

/// Flax's `nn.log_sigmoid`: `log(sigmoid(x)) = -softplus(-x)`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_log_sigmoid;
///
/// let dev: Cpu = Default::default();
/// let y = try_log_sigmoid(dev.tensor([0.0f64, -1000.0])).unwrap().array();
/// assert!((y[0] + 2.0f64.ln()).abs() < 1e-15 && y[1] == -1000.0);
/// ```
pub fn try_log_sigmoid<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    try_softplus(x.try_negate()?)?.try_negate()
}

/// `jnp.clip(x, lo, hi)`: `min(max(x, lo), hi)`, as `relu(x - lo) -
/// relu(x - hi) + lo`, so the gradient is 1 strictly inside `(lo, hi)`, 0
/// outside.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_clip;
///
/// let dev: Cpu = Default::default();
/// let y = try_clip(dev.tensor([-3.0f64, 0.5, 9.0]), -1.0, 2.0).unwrap();
/// assert_eq!(y.array(), [-1.0, 0.5, 2.0]);
/// ```
pub fn try_clip<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
    lo: f64,
    hi: f64,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    let above_hi = x.with_empty_tape().try_sub(scalar::<E>(hi))?.try_relu()?;
    x.try_sub(scalar::<E>(lo))?
        .try_relu()?
        .try_sub(above_hi)?
        .try_add(scalar::<E>(lo))
}

/// Flax's `nn.relu6`: `min(max(x, 0), 6)`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_relu6;
///
/// let dev: Cpu = Default::default();
/// assert_eq!(try_relu6(dev.tensor([-1.0f32, 3.0, 9.0])).unwrap().array(), [0.0, 3.0, 6.0]);
/// ```
pub fn try_relu6<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    try_clip(x, 0.0, 6.0)
}

/// Flax's `nn.hard_tanh`: `clip(x, -1, 1)`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_hard_tanh;
///
/// let dev: Cpu = Default::default();
/// assert_eq!(try_hard_tanh(dev.tensor([-3.0f32, 0.5, 2.0])).unwrap().array(), [-1.0, 0.5, 1.0]);
/// ```
pub fn try_hard_tanh<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    try_clip(x, -1.0, 1.0)
}

/// Flax's `nn.hard_sigmoid`: `relu6(x + 3) / 6`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_hard_sigmoid;
///
/// let dev: Cpu = Default::default();
/// assert_eq!(try_hard_sigmoid(dev.tensor([-4.0f32, 0.0, 4.0])).unwrap().array(), [0.0, 0.5, 1.0]);
/// ```
pub fn try_hard_sigmoid<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    try_relu6(x.try_add(scalar::<E>(3.0))?)?.try_mul(scalar::<E>(1.0 / 6.0))
}

/// Flax's `nn.hard_silu` (also `hard_swish`): `x * hard_sigmoid(x)`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_hard_silu;
///
/// let dev: Cpu = Default::default();
/// assert_eq!(try_hard_silu(dev.tensor([-4.0f32, 0.0, 4.0])).unwrap().array(), [0.0, 0.0, 4.0]);
/// ```
pub fn try_hard_silu<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    let gate = try_hard_sigmoid(x.with_empty_tape())?;
    x.try_mul(gate)
}

/// `jax.lax.rsqrt(x)`: `1 / sqrt(x)`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_rsqrt;
///
/// let dev: Cpu = Default::default();
/// assert_eq!(try_rsqrt(dev.tensor([4.0f64, 0.25])).unwrap().array(), [0.5, 2.0]);
/// ```
pub fn try_rsqrt<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    x.try_sqrt()?.try_recip()
}

/// `jnp.power(x, p)` for a number `p`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_pow;
///
/// let dev: Cpu = Default::default();
/// assert_eq!(try_pow(dev.tensor([2.0f64, 3.0]), 2.0).unwrap().array(), [4.0, 9.0]);
/// ```
pub fn try_pow<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
    p: f64,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    x.try_powf(p)
}

/// `jax.lax.stop_gradient(x)`: the same values, through which no gradient
/// flows. The values are copied into a tensor of their own (a new tensor
/// id, its op not on the tape), which keeps `x`'s tape for the rest of the
/// model.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::activations::try_stop_gradient;
///
/// let dev: Cpu = Default::default();
/// let x = dev.tensor([1.0f64, 2.0]);
/// let y = try_stop_gradient(x.leaky_trace()).unwrap();
/// let g = (y * x.leaky_trace()).sum().backward();
/// assert_eq!(g.get(&x).array(), [1.0, 2.0]); // only the traced factor's
/// ```
pub fn try_stop_gradient<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S, E, D, T>, D::Err> {
    let (x, tape) = dfdx::tensor::SplitTape::split_tape(x);
    // An op on a tensor without a tape records nothing.
    Ok(dfdx::tensor::PutTape::put_tape(
        x.try_mul(scalar::<E>(1.0))?,
        tape,
    ))
}
