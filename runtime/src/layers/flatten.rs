//! [`Flatten2D`]: Flax's `x.reshape((x.shape[0], -1))` for NCHW batches.

use dfdx::nn::{Module, NonMutableModule, ZeroSizedModule};
use dfdx::prelude::*;

/// Flattens every example of a `(B, C, H, W)` batch into `N = C * H * W`
/// features, `(B, N)`, in NCHW order, for any batch dim `B` and with or
/// without a tape. Free when the input is contiguous (dfdx's reshape).
///
/// `N` is a separate parameter because stable Rust cannot compute it in a
/// type; [`CHECK`](Self::CHECK) fails to compile when `N != C * H * W`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::Flatten2D;
///
/// let dev: Cpu = Default::default();
/// let x: Tensor<Rank4<2, 3, 4, 5>, f32, _> = dev.zeros();
/// let y: Tensor<Rank2<2, 60>, f32, _> = Flatten2D::<3, 4, 5, 60>.forward(x);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flatten2D<const C: usize, const H: usize, const W: usize, const N: usize>;

impl<const C: usize, const H: usize, const W: usize, const N: usize> Flatten2D<C, H, W, N> {
    /// Naming this fails to compile when `N != C * H * W`; calling the
    /// layer names it.
    pub const CHECK: () = assert!(N == C * H * W, "Flatten2D needs N == C * H * W");
}

impl<const C: usize, const H: usize, const W: usize, const N: usize> ZeroSizedModule
    for Flatten2D<C, H, W, N>
{
}

impl<const C: usize, const H: usize, const W: usize, const N: usize> NonMutableModule
    for Flatten2D<C, H, W, N>
{
}

impl<
        const C: usize,
        const H: usize,
        const W: usize,
        const N: usize,
        B: Dim,
        E: Dtype,
        D: Device<E>,
        T: Tape<E, D>,
    > Module<Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>> for Flatten2D<C, H, W, N>
{
    type Output = Tensor<(B, Const<N>), E, D, T>;
    type Error = D::Err;

    fn try_forward(
        &self,
        x: Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>,
    ) -> Result<Self::Output, D::Err> {
        const { Self::CHECK };
        let batch = x.shape().0;
        x.try_reshape_like(&(batch, Const::<N>))
    }
}
