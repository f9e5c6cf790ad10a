//! Flax's `LayerNorm` over the last axis.

use dfdx::nn::{
    BuildModule, BuildOnDevice, Module, ModuleVisitor, NonMutableModule, ScalarOptions,
    TensorCollection, TensorOptions,
};
use dfdx::prelude::*;

use super::{builder, NormRows};
use crate::layers::FlaxenDevice;

/// Flax linen's `LayerNorm` over the last axis of `[F]`, `[batch, F]` or
/// `[batch, S, F]` inputs: `(x - mean) / sqrt(var + epsilon) * gamma +
/// beta`, the mean and the (biased) variance over the `F` features of each
/// row. The same keys as dfdx's `LayerNorm1D` (`gamma` is Flax's `scale`,
/// `beta` its `bias`, and the scalar `epsilon`), so checkpoints of either
/// load into the other; `epsilon` defaults to Flax's `1e-6`. The CPU
/// normalises each row in one pass forward and one backward
/// ([`FlaxenDevice::try_norm_rows`]).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let norm = dev.build_module::<builder::LayerNorm<2>, f64>();
/// assert_eq!(norm.epsilon, 1e-6); // Flax's default
/// let y = norm.forward(dev.tensor([[1.0, 3.0]]));
/// let inv = 1.0 / (1.0f64 + 1e-6).sqrt();
/// assert!((y.array()[0][1] - inv).abs() < 1e-12);
/// ```
#[derive(Clone, Debug)]
pub struct LayerNorm<const F: usize, E: Dtype, D: Storage<E>> {
    /// Multiplies the normalized input (Flax's `scale`). Starts at 1.
    pub gamma: Tensor<Rank1<F>, E, D>,
    /// Added last (Flax's `bias`). Starts at 0.
    pub beta: Tensor<Rank1<F>, E, D>,
    /// Added to the variance before the square root.
    pub epsilon: f64,
}

impl<const F: usize, E: Dtype, D: Device<E>> BuildOnDevice<D, E> for builder::LayerNorm<F> {
    type Built = LayerNorm<F, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}

impl<const F: usize, E: Dtype, D: Device<E>> TensorCollection<E, D> for LayerNorm<F, E, D> {
    type To<E2: Dtype, D2: Device<E2>> = LayerNorm<F, E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::tensor(
                    "gamma",
                    |s| &s.gamma,
                    |s| &mut s.gamma,
                    TensorOptions::reset_to_ones(),
                ),
                Self::tensor(
                    "beta",
                    |s| &s.beta,
                    |s| &mut s.beta,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::scalar(
                    "epsilon",
                    |s| &s.epsilon,
                    |s| &mut s.epsilon,
                    ScalarOptions::from_default(1e-6),
                ),
            ),
            |(gamma, beta, epsilon)| LayerNorm {
                gamma,
                beta,
                epsilon,
            },
        )
    }
}

impl<const F: usize, E: Dtype, D: Storage<E>> NonMutableModule for LayerNorm<F, E, D> {}

impl<const F: usize, S: Shape, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>>
    Module<Tensor<S, E, D, T>> for LayerNorm<F, E, D>
where
    S: LastAxis<F>,
{
    type Output = Tensor<S, E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<S, E, D, T>) -> Result<Self::Output, D::Err> {
        let dev = x.device().clone();
        let layout = NormRows::features(F, true, self.epsilon);
        dev.try_norm_rows(x, layout, &self.gamma, Some(&self.beta))
    }
}

/// The shapes a row norm takes: `[F]`, `[batch, F]`, `[batch, S, F]`.
pub trait LastAxis<const F: usize>: Shape {}
impl<const F: usize> LastAxis<F> for (Const<F>,) {}
impl<const F: usize, B: Dim> LastAxis<F> for (B, Const<F>) {}
impl<const F: usize, B: Dim, S: Dim> LastAxis<F> for (B, S, Const<F>) {}
