//! [`StdConv`]: vit_jax's (and BiT's) weight-standardised convolution.

use dfdx::nn::{BuildOnDevice, Module, ModuleMut, ModuleVisitor, TensorCollection};
use dfdx::prelude::*;

use super::remat::{Transparent, Wrapper};
use super::ConvLayer;
use crate::dtype::scalar;

/// vit_jax's `StdConv`: the convolution `M` (any of flaxen's `Conv2D`
/// family) with its kernel standardised before each use, per output
/// channel over its inputs and window,
/// `w' = (w - mean(w)) / (std(w) + 1e-5)` (`std` the population one, as
/// `jnp.std`; the `1e-5` added to it, not to the variance). The stored
/// kernel is the raw one, under the inner layer's keys (`weight`,
/// `bias`), so a Flax checkpoint's `kernel` loads as it is; gradients
/// flow through the standardisation into it.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{builder, StdConv};
///
/// let dev: Cpu = Default::default();
/// type Conv = builder::UnbiasedConv2D<2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 5, 5, 5, 5>;
/// let conv = dev.build_module::<StdConv<Conv>, f64>();
/// let x: Tensor<Rank4<1, 2, 5, 5>, f64, _> = dev.sample_normal();
/// // Scaling the kernel changes almost nothing: it is standardised (only
/// // the `1e-5` beside the std does not scale).
/// let mut doubled = conv.clone();
/// doubled.inner.weight = doubled.inner.weight.clone() * 2.0;
/// let (a, b) = (conv.forward(x.clone()).as_vec(), doubled.forward(x).as_vec());
/// assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-3 * a.abs().max(1.0)));
/// ```
#[derive(Clone, Debug, Default)]
pub struct StdConv<M> {
    /// The convolution, holding the raw kernel.
    pub inner: M,
}

impl<M> Wrapper<M> for StdConv<M> {
    fn inner(&self) -> &M {
        &self.inner
    }
    fn inner_mut(&mut self) -> &mut M {
        &mut self.inner
    }
}

impl<D: Device<E>, E: Dtype, B: BuildOnDevice<D, E>> BuildOnDevice<D, E> for StdConv<B>
where
    B::Built: 'static,
{
    type Built = StdConv<B::Built>;
}

impl<E: Dtype, D: Device<E>, M: TensorCollection<E, D> + 'static> TensorCollection<E, D>
    for StdConv<M>
{
    type To<E2: Dtype, D2: Device<E2>> = StdConv<M::To<E2, D2>>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        let inner = M::iter_tensors(&mut Transparent {
            outer: visitor,
            wrapper: core::marker::PhantomData::<fn() -> Self>,
        })?;
        Ok(inner.map(|inner| StdConv { inner }))
    }
}

/// A kernel shape that standardises per output channel (its first axis).
pub trait Standardize<E: Dtype, D: Device<E>>: Shape {
    /// `(w - mean) / (std + eps)` over every axis but the first.
    fn standardize<T: Tape<E, D>>(
        w: Tensor<Self, E, D, T>,
        eps: f64,
    ) -> Result<Tensor<Self, E, D, T>, D::Err>;
}

impl<const O: usize, const C: usize, const KH: usize, const KW: usize, E, D> Standardize<E, D>
    for Rank4<O, C, KH, KW>
where
    E: Dtype + num_traits::Float,
    D: Device<E>,
{
    fn standardize<T: Tape<E, D>>(
        w: Tensor<Self, E, D, T>,
        eps: f64,
    ) -> Result<Tensor<Self, E, D, T>, D::Err> {
        let n = scalar::<E>(1.0 / (C * KH * KW).max(1) as f64);
        let shape = *w.shape();
        let mean = w
            .with_empty_tape()
            .try_sum::<Rank1<O>, Axes3<1, 2, 3>>()?
            .try_mul(n)?;
        let centered = w.try_sub(mean.try_broadcast_like::<_, Axes3<1, 2, 3>>(&shape)?)?;
        let std = centered
            .with_empty_tape()
            .try_square()?
            .try_sum::<Rank1<O>, Axes3<1, 2, 3>>()?
            .try_mul(n)?
            .try_sqrt()?
            .try_add(scalar::<E>(eps))?;
        centered.try_div(std.try_broadcast_like::<_, Axes3<1, 2, 3>>(&shape)?)
    }
}

impl<M, E, D, S, T> Module<Tensor<S, E, D, T>> for StdConv<M>
where
    S: Shape,
    E: Dtype,
    D: Device<E>,
    T: Tape<E, D>,
    M: ConvLayer<E, D> + Module<Tensor<S, E, D, T>, Error = D::Err>,
    M::Weight: Standardize<E, D>,
{
    type Output = M::Output;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<S, E, D, T>) -> Result<Self::Output, D::Err> {
        // The standardisation's ops go on the input's tape, before the
        // convolution's: the backward pass runs the convolution's first
        // (into the standardised kernel) and then theirs (into the raw one).
        let (x, tape) = x.split_tape();
        let w = self.inner.weight().retaped::<T>();
        let (w, w_tape) = M::Weight::standardize(w, 1e-5)?.split_tape();
        self.inner
            .with_weight(w)
            .try_forward(x.put_tape(tape.merge(w_tape)))
    }
}

impl<M, E, D, S, T> ModuleMut<Tensor<S, E, D, T>> for StdConv<M>
where
    S: Shape,
    E: Dtype,
    D: Device<E>,
    T: Tape<E, D>,
    M: ConvLayer<E, D> + Module<Tensor<S, E, D, T>, Error = D::Err>,
    M::Weight: Standardize<E, D>,
{
    type Output = M::Output;
    type Error = D::Err;

    fn try_forward_mut(&mut self, x: Tensor<S, E, D, T>) -> Result<Self::Output, D::Err> {
        self.try_forward(x)
    }
}
