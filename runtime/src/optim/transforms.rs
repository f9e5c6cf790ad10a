//! `identity`, the empty state, and the scaling every scaling primitive
//! shares.

use crate::dtype::scalar;
use dfdx::prelude::{Dtype, TryMul};
use dfdx::tensor_ops::Device;

use super::{GradientTransformation, Params, Updates};
use crate::state::{StateDict, StateError, StateMap};

impl<E> StateDict<E> for () {
    fn save_state(&self, _prefix: &str, _out: &mut StateMap<E>) {}
    fn load_state(&mut self, _prefix: &str, _src: &StateMap<E>) -> Result<(), StateError> {
        Ok(())
    }
}

/// Leaves the updates unchanged (Optax `identity`).
///
/// ```
/// use flaxen_runtime::optim::{chain, identity, sgd};
/// let tx = chain((identity(), sgd(0.1, None, false)));
/// # let _ = tx;
/// ```
pub fn identity() -> Identity {
    Identity
}

/// See [`identity`].
///
/// ```
/// let tx = flaxen_runtime::optim::Identity;
/// # let _ = tx;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl<E: Dtype, D: Device<E>> GradientTransformation<E, D> for Identity {
    type State = ();
    fn init(&self, _params: &Params<E, D>) -> Result<(), D::Err> {
        Ok(())
    }
    fn update(&self, _: &mut (), _: &mut Updates<E, D>, _: &Params<E, D>) -> Result<(), D::Err> {
        Ok(())
    }
}

/// Multiplies every update by `factor` (in place when the buffer is not
/// shared).
pub(crate) fn scale_all<E: Dtype, D: Device<E>>(
    updates: &mut Updates<E, D>,
    params: &Params<E, D>,
    factor: f64,
) -> Result<(), D::Err> {
    let f = scalar::<E>(factor);
    for i in 0..updates.len() {
        let u = updates.take(i, params)?;
        updates.set(i, u.try_mul(f)?);
    }
    Ok(())
}
