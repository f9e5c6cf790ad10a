//! Normalization layers with Flax linen's semantics: [`BatchNorm`],
//! [`RmsNorm`], [`GroupNorm`] (`LayerNorm` is dfdx's `LayerNorm1D`, which
//! already matches Flax).
//!
//! dfdx's `BatchNorm1D`/`BatchNorm2D` follow PyTorch: their running variance
//! averages the *unbiased* batch variance (`n / (n - 1)` times the one used
//! to normalize) and their momentum weighs the new batch. Flax averages the
//! biased variance it normalizes with and its momentum weighs the old value.
//! A model trained with one and evaluated like the other drifts by
//! `n / (n - 1)` in every running variance, so flaxen has its own.

mod batch_norm;
mod group_norm;
mod rms_norm;

pub use batch_norm::{BatchNorm, InferenceTape};
pub use group_norm::GroupNorm;
pub use rms_norm::RmsNorm;

/// Builders of the layers.
pub mod builder {
    /// Builds a [`BatchNorm`](super::BatchNorm) with
    /// `dev.build_module::<BatchNorm<C>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct BatchNorm<const C: usize>;

    /// Builds an [`RmsNorm`](super::RmsNorm) with
    /// `dev.build_module::<RmsNorm<F>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct RmsNorm<const F: usize>;

    /// Builds a [`GroupNorm`](super::GroupNorm) of `C` channels in `G`
    /// groups with `dev.build_module::<GroupNorm<C, G>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct GroupNorm<const C: usize, const G: usize>;
}
