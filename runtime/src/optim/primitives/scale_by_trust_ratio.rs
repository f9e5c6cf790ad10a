//! `scale_by_trust_ratio` (Optax; LAMB's layer-wise scaling).

use dfdx::prelude::{Dtype, HasShape, Tensor};
use dfdx::tensor_ops::{BroadcastTo, ChooseFrom, Device, SumTo, TryDiv, TryEq, TryMul};

use crate::optim::alias::{Primitive, Step};
use crate::optim::Leaf;

/// Optax's `scale_by_trust_ratio(min_norm=0.0, trust_coefficient=1.0,
/// eps=0.0)`: each leaf's update times `‖param‖ / ‖update‖`, unchanged
/// where either norm is zero. No state.
///
/// ```
/// use flaxen_runtime::optim::{chain, scale_by_adam, scale_by_trust_ratio, scale_by_learning_rate};
/// let tx = chain((scale_by_adam(), scale_by_trust_ratio(), scale_by_learning_rate(1e-3)));
/// # let _ = tx;
/// ```
pub fn scale_by_trust_ratio() -> ScaleByTrustRatio {
    ScaleByTrustRatio
}

/// The primitive built by [`scale_by_trust_ratio`].
///
/// ```
/// let p = flaxen_runtime::optim::ScaleByTrustRatio;
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScaleByTrustRatio;

fn norm<E: Dtype, D: Device<E>>(x: &Leaf<E, D>) -> Result<Tensor<(), E, D>, D::Err> {
    x.clone().try_square()?.try_sum()?.try_sqrt()
}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ScaleByTrustRatio {
    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (_, _, updates, params) = step.parts();
        for (i, p) in params.leaves().iter().enumerate() {
            let u = updates.take(i, params)?;
            let (p_norm, u_norm) = (norm(p)?, norm(&u)?);
            let zero = E::default();
            let either_zero = &p_norm.try_eq(zero)? | &u_norm.try_eq(zero)?;
            let ratio = p_norm.clone().try_div(u_norm)?;
            let one = p.device().try_ones_like(&())?;
            let ratio = either_zero
                .try_choose(one, ratio)?
                .try_broadcast_like(u.shape())?;
            updates.set(i, u.try_mul(ratio)?);
        }
        Ok(())
    }
}
