//! `scale` (Optax).

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::Device;

use crate::optim::alias::{Primitive, Step};
use crate::optim::transforms::scale_all;

/// Optax's `scale(step_size)`: `updates *= step_size`. No state.
///
/// ```
/// use flaxen_runtime::optim::{chain, scale, scale_by_adam};
/// let tx = chain((scale_by_adam(), scale(-1e-3))); // adam(1e-3)
/// # let _ = tx;
/// ```
pub fn scale(factor: f64) -> Scale {
    Scale(factor)
}

/// The primitive built by [`scale`].
///
/// ```
/// let p = flaxen_runtime::optim::Scale(-1.0);
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Scale(pub f64);

impl<E: Dtype, D: Device<E>> Primitive<E, D> for Scale {
    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (_, _, updates, params) = step.parts();
        scale_all(updates, params, self.0)
    }
}
