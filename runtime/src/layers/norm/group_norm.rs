//! Flax's `GroupNorm`.

use dfdx::nn::{
    BuildModule, BuildOnDevice, Module, ModuleVisitor, NonMutableModule, ScalarOptions,
    TensorCollection, TensorOptions,
};
use dfdx::prelude::*;

use super::{builder, NormRows};
use crate::layers::FlaxenDevice;

/// Flax linen's `GroupNorm` over `[batch, C, H, W]` (NCHW) inputs: the `C`
/// channels form `G` groups of `C / G`; each example's group is normalized
/// with its own mean and (biased) variance over its channels and all
/// positions, then `* scale + bias` per channel. No batch statistics, so
/// the same in training and inference, with or without a tape. Keys:
/// `scale`, `bias`, and the scalar `epsilon`. `C % G != 0` does not compile.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let norm = dev.build_module::<builder::GroupNorm<4, 2>, f64>();
/// assert_eq!(norm.epsilon, 1e-6); // Flax's default
/// let x: Tensor<Rank4<3, 4, 5, 5>, f64, _> = dev.sample_normal();
/// let y = norm.forward(x).array();
/// // Each group of two channels has mean 0 per example.
/// let group: f64 = y[1][2].iter().chain(&y[1][3]).flatten().sum();
/// assert!(group.abs() < 1e-9);
/// ```
#[derive(Clone, Debug)]
pub struct GroupNorm<const C: usize, const G: usize, E: Dtype, D: Storage<E>> {
    /// Multiplies the normalized input, per channel. Starts at 1.
    pub scale: Tensor<Rank1<C>, E, D>,
    /// Added last, per channel. Starts at 0.
    pub bias: Tensor<Rank1<C>, E, D>,
    /// Added to the variance before the square root. Flax's default `1e-6`.
    pub epsilon: f64,
}

impl<const C: usize, const G: usize, E: Dtype, D: Device<E>> BuildOnDevice<D, E>
    for builder::GroupNorm<C, G>
{
    type Built = GroupNorm<C, G, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}

impl<const C: usize, const G: usize, E: Dtype, D: Device<E>> TensorCollection<E, D>
    for GroupNorm<C, G, E, D>
{
    type To<E2: Dtype, D2: Device<E2>> = GroupNorm<C, G, E2, D2>;

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
                Self::tensor(
                    "bias",
                    |s| &s.bias,
                    |s| &mut s.bias,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::scalar(
                    "epsilon",
                    |s| &s.epsilon,
                    |s| &mut s.epsilon,
                    ScalarOptions::from_default(1e-6),
                ),
            ),
            |(scale, bias, epsilon)| GroupNorm {
                scale,
                bias,
                epsilon,
            },
        )
    }
}

impl<const C: usize, const G: usize, E: Dtype, D: Storage<E>> NonMutableModule
    for GroupNorm<C, G, E, D>
{
}

impl<const C: usize, const G: usize, E: Dtype, D: Device<E>> GroupNorm<C, G, E, D> {
    const GROUPS: usize = {
        assert!(
            G >= 1 && C.is_multiple_of(G),
            "GroupNorm needs the channels C divisible by the groups G"
        );
        G
    };
}

impl<
        const C: usize,
        const G: usize,
        B: Dim,
        H: Dim,
        W: Dim,
        E: Dtype,
        D: FlaxenDevice<E>,
        T: Tape<E, D>,
    > Module<Tensor<(B, Const<C>, H, W), E, D, T>> for GroupNorm<C, G, E, D>
{
    type Output = Tensor<(B, Const<C>, H, W), E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<(B, Const<C>, H, W), E, D, T>) -> Result<Self::Output, D::Err> {
        let (_, _, h, w) = *x.shape();
        let plane = h.size() * w.size();
        // Each example's group is one row of `C / G * H * W` values.
        let layout = NormRows {
            row: C / Self::GROUPS * plane,
            plane,
            center: true,
            epsilon: self.epsilon,
        };
        let dev = x.device().clone();
        dev.try_norm_rows(x, layout, &self.scale, Some(&self.bias))
    }
}
