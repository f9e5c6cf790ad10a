//! [`Relu`]: `nn.relu` as a layer whose CPU kernel runs on every core.
//!
//! dfdx's `ReLU` computes the same values and gradients on one thread, with
//! an indexed (bounds-checked) backward loop; after a conv layer the
//! activations are megabytes. Swapping `ReLU` for `Relu` in
//! `examples/bench_layers` measured W1 17% faster and W2 2% (medians of
//! alternated runs on a loaded machine).

use dfdx::nn::{Module, NonMutableModule, ZeroSizedModule};
use dfdx::prelude::*;

use super::FlaxenDevice;

/// `max(x, 0)` elementwise, for any shape, with or without a tape; the
/// gradient is 1 where `x > 0` and 0 elsewhere (as dfdx's `ReLU`). On
/// devices without a flaxen kernel it is dfdx's `relu`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::Relu;
///
/// let dev: Cpu = Default::default();
/// let x = dev.tensor([-1.0f32, 0.0, 2.0]);
/// let y = Relu.forward(x.leaky_trace());
/// assert_eq!(y.array(), [0.0, 0.0, 2.0]);
/// let grads = y.sum().backward();
/// assert_eq!(grads.get(&x).array(), [0.0, 0.0, 1.0]);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Relu;

impl ZeroSizedModule for Relu {}
impl NonMutableModule for Relu {}

impl<S: Shape, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>> Module<Tensor<S, E, D, T>> for Relu {
    type Output = Tensor<S, E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<S, E, D, T>) -> Result<Self::Output, D::Err> {
        let dev = x.device().clone();
        dev.try_relu_fast(x)
    }
}
