//! [`Gelu`]: Flax's `nn.gelu` (tanh form) as a layer whose CPU kernel is
//! one parallel pass each way.

use dfdx::nn::{Module, NonMutableModule, ZeroSizedModule};
use dfdx::prelude::*;

use super::FlaxenDevice;

/// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x³)))` elementwise, Flax's
/// `nn.gelu` with its default `approximate=True` (dfdx's `fast_gelu`), for
/// any shape, with or without a tape. On the CPU, `f32` computes `tanh`
/// with XLA's rational approximation (within 2.9e-7 of the exact value)
/// and `f64` with libm; other devices run dfdx's `fast_gelu`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::Gelu;
///
/// let dev: Cpu = Default::default();
/// let x = dev.tensor([-1.0f64, 0.0, 2.0]);
/// let y = Gelu.forward(x.leaky_trace());
/// assert!((y.array()[2] - 1.954_597_694_087_775).abs() < 1e-12);
/// let grads = y.sum().backward();
/// assert!((grads.get(&x).array()[1] - 0.5).abs() < 1e-12);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Gelu;

impl ZeroSizedModule for Gelu {}
impl NonMutableModule for Gelu {}

impl<S: Shape, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>> Module<Tensor<S, E, D, T>> for Gelu {
    type Output = Tensor<S, E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<S, E, D, T>) -> Result<Self::Output, D::Err> {
        let dev = x.device().clone();
        dev.try_gelu_tanh(x)
    }
}
