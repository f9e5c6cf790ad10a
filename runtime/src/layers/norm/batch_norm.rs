//! Flax's `BatchNorm`, with its running statistics.

use crate::dtype::scalar;
use dfdx::nn::{
    BuildModule, BuildOnDevice, Module, ModuleMut, ModuleVisitor, ScalarOptions, TensorCollection,
    TensorOptions,
};
use dfdx::prelude::*;

use super::builder;

/// Flax linen's `BatchNorm` over the channel axis of `[batch, C]` or
/// `[batch, C, H, W]` (NCHW) inputs: in training, normalize with the batch
/// mean and biased variance over every other axis, then
/// `running = momentum * running + (1 - momentum) * batch_stat`; in
/// inference, normalize with the running statistics. Then `* scale + bias`.
///
/// The mode follows dfdx's convention (as `Dropout` does):
/// - **training**: `forward_mut` ([`ModuleMut`]) on a tensor with an
///   [`OwnedTape`], Flax's `use_running_average=False` with
///   `mutable=['batch_stats']`;
/// - **inference**: `forward` ([`Module`]) on a tensor without a tape,
///   Flax's `use_running_average=True`.
///
/// The other two combinations do not compile, so a training step cannot
/// silently run in inference mode. `running_mean` and `running_var` are
/// saved and loaded with the model but never touched by optimizers. Keys:
/// `scale`, `bias`, `running_mean`, `running_var` (Flax's `scale`, `bias`,
/// `batch_stats.mean`, `batch_stats.var`), plus the scalars `epsilon` and
/// `momentum`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let mut bn = dev.build_module::<builder::BatchNorm<3>, f64>();
/// assert_eq!((bn.momentum, bn.epsilon), (0.99, 1e-5)); // Flax's defaults
/// let x: Tensor<Rank4<8, 3, 4, 4>, f64, _> = dev.sample_normal();
/// let y = bn.forward_mut(x.leaky_trace()); // training: batch statistics
/// let g = y.square().mean().backward();
/// let _ = g.get(&bn.scale);
/// let _ = bn.forward(x); // inference: running statistics
/// ```
#[derive(Clone, Debug)]
pub struct BatchNorm<const C: usize, E: Dtype, D: Storage<E>> {
    /// Multiplies the normalized input. Starts at 1.
    pub scale: Tensor<Rank1<C>, E, D>,
    /// Added last. Starts at 0.
    pub bias: Tensor<Rank1<C>, E, D>,
    /// Running mean of the batch means. Starts at 0.
    pub running_mean: Tensor<Rank1<C>, E, D>,
    /// Running mean of the (biased) batch variances. Starts at 1.
    pub running_var: Tensor<Rank1<C>, E, D>,
    /// Added to the variance before the square root. Flax's default `1e-5`.
    pub epsilon: f64,
    /// Weight of the old running value, Flax's convention. Default `0.99`.
    pub momentum: f64,
}

impl<const C: usize, E: Dtype, D: Device<E>> BuildOnDevice<D, E> for builder::BatchNorm<C> {
    type Built = BatchNorm<C, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}

impl<const C: usize, E: Dtype, D: Device<E>> TensorCollection<E, D> for BatchNorm<C, E, D> {
    type To<E2: Dtype, D2: Device<E2>> = BatchNorm<C, E2, D2>;

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
                Self::tensor(
                    "running_mean",
                    |s| &s.running_mean,
                    |s| &mut s.running_mean,
                    TensorOptions::detached(|t| t.try_fill_with_zeros()),
                ),
                Self::tensor(
                    "running_var",
                    |s| &s.running_var,
                    |s| &mut s.running_var,
                    TensorOptions::detached(|t| t.try_fill_with_ones()),
                ),
                Self::scalar(
                    "epsilon",
                    |s| &s.epsilon,
                    |s| &mut s.epsilon,
                    ScalarOptions::from_default(1e-5),
                ),
                Self::scalar(
                    "momentum",
                    |s| &s.momentum,
                    |s| &mut s.momentum,
                    ScalarOptions::from_default(0.99),
                ),
            ),
            |(scale, bias, running_mean, running_var, epsilon, momentum)| BatchNorm {
                scale,
                bias,
                running_mean,
                running_var,
                epsilon,
                momentum,
            },
        )
    }
}

impl<const C: usize, E: Dtype, D: Device<E>> BatchNorm<C, E, D> {
    /// `(x - mean) / sqrt(var + epsilon) * scale + bias`, with `mean` and
    /// `var` per channel, broadcast along the axes `Ax` of `x`.
    fn normalize<S: Shape, Ax: Axes, T: Tape<E, D>>(
        &self,
        centered: Tensor<S, E, D, T>,
        var: Tensor<Rank1<C>, E, D, T>,
    ) -> Result<Tensor<S, E, D, T>, D::Err>
    where
        Rank1<C>: BroadcastShapeTo<S, Ax>,
    {
        let shape = *centered.shape();
        let std = var.try_add(scalar::<E>(self.epsilon))?.try_sqrt()?;
        let scale = self
            .scale
            .retaped::<T>()
            .try_div(std)?
            .try_broadcast_like(&shape)?;
        let bias = self.bias.retaped::<T>().try_broadcast_like(&shape)?;
        centered.try_mul(scale)?.try_add(bias)
    }

    fn infer<S: Shape, Ax: Axes>(&self, x: Tensor<S, E, D>) -> Result<Tensor<S, E, D>, D::Err>
    where
        Rank1<C>: BroadcastShapeTo<S, Ax>,
    {
        let shape = *x.shape();
        let centered = x.try_sub(self.running_mean.clone().try_broadcast_like(&shape)?)?;
        self.normalize(centered, self.running_var.clone())
    }

    fn train<S, Ax: Axes>(&mut self, x: Taped<S, E, D>) -> Result<Taped<S, E, D>, D::Err>
    where
        S: Shape + HasAxes<Ax> + ReduceShapeTo<Rank1<C>, Ax>,
    {
        type T<E, D> = OwnedTape<E, D>;
        let shape = *x.shape();
        let m = self.momentum;
        // The statistics stay on the tape: the gradient flows through the
        // batch mean and variance, as in Flax. Each statistic's own tape
        // holds its backward ops, so the running update reads it before the
        // tensor is consumed.
        let mean = x.retaped::<T<E, D>>().try_mean::<Rank1<C>, Ax>()?;
        self.running_mean.try_axpy(m, &mean, 1.0 - m)?;
        let centered = x.try_sub(mean.try_broadcast_like(&shape)?)?;
        let var = centered
            .retaped::<T<E, D>>()
            .try_square()?
            .try_mean::<Rank1<C>, Ax>()?;
        self.running_var.try_axpy(m, &var, 1.0 - m)?;
        self.normalize(centered, var)
    }
}

/// A tensor on a gradient tape.
type Taped<S, E, D> = Tensor<S, E, D, OwnedTape<E, D>>;

/// `Module` (inference) and `ModuleMut` (training) for one input rank.
/// The tapes `BatchNorm`'s `forward` (inference) takes: none.
///
/// `forward` on a taped input would normalise with the running statistics
/// and never update them, so `Module` for a taped input exists only to
/// carry this message, through the bound no tape but [`NoneTape`] meets.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::InferenceTape;
///
/// fn infers<T: InferenceTape>() {}
/// infers::<NoneTape>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`BatchNorm` trains through `forward_mut`, not `forward`: `forward` is inference, on an input without a tape",
    label = "`forward` here gets an input with a gradient tape",
    note = "train with `model.forward_mut(x.traced(grads))` (batch statistics, running averages updated); infer with `model.forward(x)` on an input without a tape (running statistics)"
)]
pub trait InferenceTape {}

impl InferenceTape for NoneTape {}

macro_rules! batch_norm_impls {
    ([$($dims:tt)*], ($($shape:tt)*), $ax:ty) => {
        impl<$($dims)* const C: usize, E: Dtype, D: Device<E>>
            Module<Tensor<($($shape)*), E, D, OwnedTape<E, D>>> for BatchNorm<C, E, D>
        where
            OwnedTape<E, D>: InferenceTape,
        {
            type Output = Tensor<($($shape)*), E, D, OwnedTape<E, D>>;
            type Error = D::Err;

            fn try_forward(
                &self,
                _: Tensor<($($shape)*), E, D, OwnedTape<E, D>>,
            ) -> Result<Self::Output, D::Err> {
                unreachable!("no OwnedTape is an InferenceTape")
            }
        }

        impl<$($dims)* const C: usize, E: Dtype, D: Device<E>>
            Module<Tensor<($($shape)*), E, D, NoneTape>> for BatchNorm<C, E, D>
        {
            type Output = Tensor<($($shape)*), E, D, NoneTape>;
            type Error = D::Err;

            fn try_forward(&self, x: Tensor<($($shape)*), E, D>) -> Result<Self::Output, D::Err> {
                self.infer::<_, $ax>(x)
            }
        }

        impl<$($dims)* const C: usize, E: Dtype, D: Device<E>>
            ModuleMut<Tensor<($($shape)*), E, D, OwnedTape<E, D>>> for BatchNorm<C, E, D>
        {
            type Output = Tensor<($($shape)*), E, D, OwnedTape<E, D>>;
            type Error = D::Err;

            fn try_forward_mut(
                &mut self,
                x: Tensor<($($shape)*), E, D, OwnedTape<E, D>>,
            ) -> Result<Self::Output, D::Err> {
                self.train::<_, $ax>(x)
            }
        }
    };
}

batch_norm_impls!([B: Dim,], (B, Const<C>), Axis<0>);
batch_norm_impls!([B: Dim, H: Dim, W: Dim,], (B, Const<C>, H, W), Axes3<0, 2, 3>);
