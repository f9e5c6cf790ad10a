//! Normalization layers with Flax linen's semantics: [`BatchNorm`],
//! [`LayerNorm`], [`RmsNorm`], [`GroupNorm`].
//!
//! dfdx's `BatchNorm1D`/`BatchNorm2D` follow PyTorch: their running variance
//! averages the *unbiased* batch variance (`n / (n - 1)` times the one used
//! to normalize) and their momentum weighs the new batch. Flax averages the
//! biased variance it normalizes with and its momentum weighs the old value.
//! A model trained with one and evaluated like the other drifts by
//! `n / (n - 1)` in every running variance, so flaxen has its own.

mod batch_norm;
mod group_norm;
mod layer_norm;
mod rms_norm;

pub use batch_norm::{BatchNorm, InferenceTape};
pub use group_norm::GroupNorm;
pub use layer_norm::{LastAxis, LayerNorm};
pub use rms_norm::RmsNorm;

use crate::dtype::scalar;
use dfdx::prelude::*;

/// How [`FlaxenDevice::try_norm_rows`](super::FlaxenDevice::try_norm_rows)
/// normalises a tensor: as rows of `row` values, each with its own mean
/// (when `center`) and variance; one scale (and bias) entry per `plane`
/// consecutive values of a row, the rows going through the scale in turn.
/// LayerNorm and RMSNorm over `F` features are rows of `F` with a plane
/// of 1; GroupNorm over `[C, H, W]` in `G` groups, rows of `C / G * H * W`
/// with a plane of `H * W`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormRows {
    /// Values normalised together.
    pub row: usize,
    /// Consecutive values that share a scale entry.
    pub plane: usize,
    /// Subtract the mean (LayerNorm, GroupNorm) or not (RMSNorm).
    pub center: bool,
    /// Added to the variance (mean square) before the square root.
    pub epsilon: f64,
}

impl NormRows {
    /// Flax's `LayerNorm` (`center`) or `RMSNorm` over `features`.
    pub fn features(features: usize, center: bool, epsilon: f64) -> Self {
        Self {
            row: features,
            plane: 1,
            center,
            epsilon,
        }
    }

    /// Panics unless `n` values make whole rows and a row's scale entries
    /// divide the scale's `scale` entries.
    pub(crate) fn check(&self, n: usize, scale: usize) {
        let ok = self.row > 0
            && self.plane > 0
            && self.row.is_multiple_of(self.plane)
            && n.is_multiple_of(self.row)
            && scale > 0
            && scale.is_multiple_of(self.row / self.plane);
        assert!(
            ok,
            "{self:?} cannot normalise {n} values with a scale of {scale}"
        );
    }
}

/// [`FlaxenDevice::try_norm_rows`](super::FlaxenDevice::try_norm_rows) in
/// dfdx's ops: every device's default.
pub(crate) fn norm_rows_composite<S, const F: usize, E, D, T>(
    x: Tensor<S, E, D, T>,
    layout: NormRows,
    scale: &Tensor<Rank1<F>, E, D>,
    bias: Option<&Tensor<Rank1<F>, E, D>>,
) -> Result<Tensor<S, E, D, T>, D::Err>
where
    S: Shape,
    E: Dtype,
    D: Device<E>,
    T: Tape<E, D>,
{
    let shape = *x.shape();
    let n = shape.num_elements();
    layout.check(n, F);
    let rows = (n / layout.row, layout.row);
    let x = x.try_reshape_like(&rows)?;
    let y = if layout.center {
        x.try_normalize::<Axis<1>>(layout.epsilon)?
    } else {
        let inv_rms = x
            .with_empty_tape()
            .try_square()?
            .try_mean::<(usize,), Axis<1>>()?
            .try_add(scalar::<E>(layout.epsilon))?
            .try_sqrt()?
            .try_recip()?
            .try_broadcast_like::<_, Axis<1>>(&rows)?;
        x.try_mul(inv_rms)?
    };
    // [.., F, plane]: each scale entry over its plane.
    let planes = (n / (F * layout.plane), Const::<F>, layout.plane);
    let y = y.try_reshape_like(&planes)?;
    let y = y.try_mul(
        scale
            .retaped::<T>()
            .try_broadcast_like::<_, Axes2<0, 2>>(&planes)?,
    )?;
    let y = match bias {
        Some(b) => y.try_add(
            b.retaped::<T>()
                .try_broadcast_like::<_, Axes2<0, 2>>(&planes)?,
        )?,
        None => y,
    };
    y.try_reshape_like(&shape)
}

/// Builders of the layers.
pub mod builder {
    /// Builds a [`BatchNorm`](super::BatchNorm) with
    /// `dev.build_module::<BatchNorm<C>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct BatchNorm<const C: usize>;

    /// Builds a [`LayerNorm`](super::LayerNorm) with
    /// `dev.build_module::<LayerNorm<F>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct LayerNorm<const F: usize>;

    /// Builds an [`RmsNorm`](super::RmsNorm) with
    /// `dev.build_module::<RmsNorm<F>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct RmsNorm<const F: usize>;

    /// Builds a [`GroupNorm`](super::GroupNorm) of `C` channels in `G`
    /// groups with `dev.build_module::<GroupNorm<C, G>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct GroupNorm<const C: usize, const G: usize>;
}
