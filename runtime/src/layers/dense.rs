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
}

/// A fully connected layer with bias, `y = x W^T + b`, for `(B, I)` inputs
/// with any batch dim `B`, with or without a tape.
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
