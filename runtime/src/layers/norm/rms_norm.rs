//! Flax's `RMSNorm`.

use dfdx::nn::{
    BuildModule, BuildOnDevice, Module, ModuleVisitor, NonMutableModule, ScalarOptions,
    TensorCollection, TensorOptions,
};
use dfdx::prelude::*;

use super::{builder, LastAxis, NormRows};
use crate::layers::FlaxenDevice;

/// Flax linen's `RMSNorm` over the last axis of `[batch, F]` or
/// `[batch, S, F]` inputs (and `[F]`): `x / sqrt(mean(x²) + epsilon) * scale`. No
/// batch statistics, so the same in training and inference, with or without
/// a tape. Keys: `scale` (Flax's name), and the scalar `epsilon`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let norm = dev.build_module::<builder::RmsNorm<2>, f64>();
/// assert_eq!(norm.epsilon, 1e-6); // Flax's default
/// let y = norm.forward(dev.tensor([[3.0, 4.0]]));
/// let rms = (12.5f64 + 1e-6).sqrt();
/// assert!((y.array()[0][1] - 4.0 / rms).abs() < 1e-12);
/// ```
#[derive(Clone, Debug)]
pub struct RmsNorm<const F: usize, E: Dtype, D: Storage<E>> {
    /// Multiplies the normalized input. Starts at 1.
    pub scale: Tensor<Rank1<F>, E, D>,
    /// Added to the mean square before the square root. Flax's default `1e-6`.
    pub epsilon: f64,
}

impl<const F: usize, E: Dtype, D: Device<E>> BuildOnDevice<D, E> for builder::RmsNorm<F> {
    type Built = RmsNorm<F, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}

impl<const F: usize, E: Dtype, D: Device<E>> TensorCollection<E, D> for RmsNorm<F, E, D> {
    type To<E2: Dtype, D2: Device<E2>> = RmsNorm<F, E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::tensor(
                    "scale",
                    |s| &s.scale,
                    |s| &mut s.scale,
                    TensorOptions::reset_to_ones(),
                ),
                Self::scalar(
                    "epsilon",
                    |s| &s.epsilon,
                    |s| &mut s.epsilon,
                    ScalarOptions::from_default(1e-6),
                ),
            ),
            |(scale, epsilon)| RmsNorm { scale, epsilon },
        )
    }
}

impl<const F: usize, E: Dtype, D: Storage<E>> NonMutableModule for RmsNorm<F, E, D> {}

impl<const F: usize, S: Shape, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>>
    Module<Tensor<S, E, D, T>> for RmsNorm<F, E, D>
where
    S: LastAxis<F>,
{
    type Output = Tensor<S, E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<S, E, D, T>) -> Result<Self::Output, D::Err> {
        let dev = x.device().clone();
        let layout = NormRows::features(F, false, self.epsilon);
        dev.try_norm_rows(x, layout, &self.scale, None)
    }
}
