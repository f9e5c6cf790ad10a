//! [`Dense`]: Flax's `nn.Dense` as a dfdx module, run by flaxen's own CPU
//! kernel.
//!
//! dfdx's `Linear` computes the same thing, but through gemm 0.15, whose
//! stable build has no AVX-512 kernels (its AVX2 kernels were about 15% of
//! W2's step in a profile); flaxen's kernel uses gemm 0.19 with them.
//! Swapping `Linear` for `Dense` in `examples/bench_layers` measured W1
//! 14% and W2 4% faster (medians of alternated runs on a loaded machine).

use dfdx::nn::{BuildModule, BuildOnDevice, Module, NonMutableModule};
use dfdx::prelude::*;

use super::conv::LecunNormal;
use super::FlaxenDevice;

/// Builders of the layers with parameters.
pub mod builder {
    /// Builds a [`Dense`](super::Dense) with `dev.build_module::<Dense<I, O>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct Dense<const I: usize, const O: usize>;

    /// Builds an [`UnbiasedDense`](super::UnbiasedDense) with
    /// `dev.build_module::<UnbiasedDense<I, O>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct UnbiasedDense<const I: usize, const O: usize>;
}

/// A fully connected layer with bias, `y = x W^T + b`, for `(B, I)` and
/// `(B, S, I)` inputs (Flax's `Dense` on the last axis) with any dims `B`
/// and `S`, with or without a tape.
///
/// The parameters are laid out and named as in dfdx's `Linear` (`weight`,
/// `(O, I)`, i.e. Flax's kernel transposed, and `bias`, `(O,)`), so
/// checkpoints of either load into the other; initialisation follows Flax
/// (`lecun_normal` weight, zero bias).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let dense = dev.build_module::<builder::Dense<3, 2>, f32>();
/// let x: Tensor<Rank2<4, 3>, f32, _> = dev.ones();
/// let grads = dense.forward(x.leaky_trace()).sum().backward();
/// assert_eq!(grads.get(&dense.bias).array(), [4.0, 4.0]);
/// ```
#[derive(Debug, Clone)]
pub struct Dense<const I: usize, const O: usize, E: Dtype, D: Storage<E>> {
    /// The kernel, `(O, I)`.
    pub weight: Tensor<Rank2<O, I>, E, D>,
    /// The bias, `(O,)`.
    pub bias: Tensor<Rank1<O>, E, D>,
}

impl<const I: usize, const O: usize, E: Dtype, D: Device<E>> BuildOnDevice<D, E>
    for builder::Dense<I, O>
where
    Dense<I, O, E, D>: BuildModule<D, E>,
{
    type Built = Dense<I, O, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}

impl<const I: usize, const O: usize, E: Dtype, D: Storage<E>> NonMutableModule
    for Dense<I, O, E, D>
{
}

impl<const I: usize, const O: usize, E: Dtype, D: Device<E>> TensorCollection<E, D>
    for Dense<I, O, E, D>
{
    type To<E2: Dtype, D2: Device<E2>> = Dense<I, O, E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::tensor(
                    "weight",
                    |s| &s.weight,
                    |s| &mut s.weight,
                    TensorOptions::reset_with(|t| t.try_fill_with_distr(LecunNormal { fan_in: I })),
                ),
                Self::tensor(
                    "bias",
                    |s| &s.bias,
                    |s| &mut s.bias,
                    TensorOptions::reset_with(|t| t.try_fill_with_zeros()),
                ),
            ),
            |(weight, bias)| Dense { weight, bias },
        )
    }
}

impl<const I: usize, const O: usize, B: Dim, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>>
    Module<Tensor<(B, Const<I>), E, D, T>> for Dense<I, O, E, D>
{
    type Output = Tensor<(B, Const<O>), E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<(B, Const<I>), E, D, T>) -> Result<Self::Output, D::Err> {
        let dev = x.device().clone();
        dev.try_dense(x, &self.weight, &self.bias)
    }
}

/// `(B, S, I)`: the `B * S` rows through the same kernel.
impl<
        const I: usize,
        const O: usize,
        B: Dim,
        S: Dim,
        E: Dtype,
        D: FlaxenDevice<E>,
        T: Tape<E, D>,
    > Module<Tensor<(B, S, Const<I>), E, D, T>> for Dense<I, O, E, D>
{
    type Output = Tensor<(B, S, Const<O>), E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<(B, S, Const<I>), E, D, T>) -> Result<Self::Output, D::Err> {
        let (b, s, _) = *x.shape();
        let rows = x.try_reshape_like(&(b.size() * s.size(), Const::<I>))?;
        self.try_forward(rows)?
            .try_reshape_like(&(b, s, Const::<O>))
    }
}

/// Flax's `Dense(use_bias=False)`: `y = x W^T` for `(B, I)` and `(B, S, I)`
/// inputs, with or without a tape. Laid out and named like dfdx's
/// `UnbiasedLinear` (`weight`, `(O, I)`), initialised like Flax
/// (`lecun_normal`). dfdx's `matmul` does the work on every device.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let dense = dev.build_module::<builder::UnbiasedDense<3, 2>, f32>();
/// let x: Tensor<Rank3<4, 5, 3>, f32, _> = dev.zeros();
/// let y: Tensor<Rank3<4, 5, 2>, f32, _> = dense.forward(x);
/// assert_eq!(y.as_vec(), vec![0.0; 40]);
/// ```
#[derive(Debug, Clone)]
pub struct UnbiasedDense<const I: usize, const O: usize, E: Dtype, D: Storage<E>> {
    /// The kernel, `(O, I)`.
    pub weight: Tensor<Rank2<O, I>, E, D>,
}

impl<const I: usize, const O: usize, E: Dtype, D: Device<E>> BuildOnDevice<D, E>
    for builder::UnbiasedDense<I, O>
where
    UnbiasedDense<I, O, E, D>: BuildModule<D, E>,
{
    type Built = UnbiasedDense<I, O, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}

impl<const I: usize, const O: usize, E: Dtype, D: Storage<E>> NonMutableModule
    for UnbiasedDense<I, O, E, D>
{
}

impl<const I: usize, const O: usize, E: Dtype, D: Device<E>> TensorCollection<E, D>
    for UnbiasedDense<I, O, E, D>
{
    type To<E2: Dtype, D2: Device<E2>> = UnbiasedDense<I, O, E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            Self::tensor(
                "weight",
                |s| &s.weight,
                |s| &mut s.weight,
                TensorOptions::reset_with(|t| t.try_fill_with_distr(LecunNormal { fan_in: I })),
            ),
            |weight| UnbiasedDense { weight },
        )
    }
}

impl<const I: usize, const O: usize, E: Dtype, D: Device<E>, X> Module<X>
    for UnbiasedDense<I, O, E, D>
where
    X: SplitTape + TryMatMul<Tensor<Rank2<I, O>, E, D, X::Tape>> + HasErr<Err = D::Err>,
    X::Tape: Tape<E, D>,
{
    type Output = X::Output;
    type Error = D::Err;

    fn try_forward(&self, x: X) -> Result<Self::Output, D::Err> {
        x.try_matmul(self.weight.retaped::<X::Tape>().try_permute()?)
    }
}
