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

/// [`FlaxenDevice::try_norm_rows`](super::FlaxenDevice::try_norm_rows) in
/// dfdx's ops: every device's default.
pub(crate) fn norm_rows_composite<S, const F: usize, E, D, T>(
    x: Tensor<S, E, D, T>,
    center: bool,
    scale: &Tensor<Rank1<F>, E, D>,
    bias: Option<&Tensor<Rank1<F>, E, D>>,
    epsilon: f64,
) -> Result<Tensor<S, E, D, T>, D::Err>
where
    S: Shape,
    E: Dtype,
    D: Device<E>,
    T: Tape<E, D>,
{
    let shape = *x.shape();
    let rows = (shape.num_elements() / F, Const::<F>);
    let x = x.try_reshape_like(&rows)?;
    let y = if center {
        x.try_normalize::<Axis<1>>(epsilon)?
    } else {
        let inv_rms = x
            .with_empty_tape()
            .try_square()?
            .try_mean::<_, Axis<1>>()?
            .try_add(scalar::<E>(epsilon))?
            .try_sqrt()?
            .try_recip()?
            .try_broadcast_like(&rows)?;
        x.try_mul(inv_rms)?
    };
    let y = y.try_mul(scale.retaped::<T>().try_broadcast_like(&rows)?)?;
    let y = match bias {
        Some(b) => y.try_add(b.retaped::<T>().try_broadcast_like(&rows)?)?,
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
