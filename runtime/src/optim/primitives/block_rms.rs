//! `clip_by_block_rms` and `scale_by_param_block_rms` (Optax; Adafactor's
//! per-tensor clipping and parameter scale).

use dfdx::prelude::{Dtype, HasShape, Tensor};
use dfdx::tensor_ops::{BroadcastTo, Device, SumTo, TryDiv, TryMul};

use crate::dtype::scalar;
use crate::optim::alias::{Primitive, Step};
use crate::optim::Leaf;

fn rms<E: Dtype, D: Device<E>>(x: &Leaf<E, D>) -> Result<Tensor<(), E, D>, D::Err> {
    let n = E::from_usize(x.shape().0).unwrap_or_default();
    x.clone().try_square()?.try_sum()?.try_div(n)?.try_sqrt()
}

/// Optax's `clip_by_block_rms(threshold)`: each leaf's update divided by
/// `max(1, rms(u) / threshold)` (`None`: unchanged). No state.
///
/// ```
/// let p = flaxen_runtime::optim::clip_by_block_rms(1.0);
/// # let _ = p;
/// ```
pub fn clip_by_block_rms(threshold: f64) -> ClipByBlockRms {
    ClipByBlockRms(Some(threshold))
}

/// The primitive built by [`clip_by_block_rms`].
///
/// ```
/// let p = flaxen_runtime::optim::ClipByBlockRms(None);
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ClipByBlockRms(pub Option<f64>);

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ClipByBlockRms {
    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (_, _, updates, params) = step.parts();
        let Some(c) = self.0 else {
            return Ok(());
        };
        for i in 0..params.len() {
            let u = updates.take(i, params)?;
            let one = u.device().try_ones_like(&())?;
            let denom = rms(&u)?
                .try_div(scalar::<E>(c))?
                .try_maximum(one)?
                .try_broadcast_like(u.shape())?;
            updates.set(i, u.try_div(denom)?);
        }
        Ok(())
    }
}

/// Optax's `scale_by_param_block_rms(min_scale=1e-3)`: each leaf's update
/// times `max(rms(param), min_scale)` (`ScaleByParamBlockRms(false)`:
/// unchanged). No state.
///
/// ```
/// let p = flaxen_runtime::optim::scale_by_param_block_rms();
/// # let _ = p;
/// ```
pub fn scale_by_param_block_rms() -> ScaleByParamBlockRms {
    ScaleByParamBlockRms(true)
}

/// The primitive built by [`scale_by_param_block_rms`].
///
/// ```
/// let p = flaxen_runtime::optim::ScaleByParamBlockRms(true);
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScaleByParamBlockRms(pub bool);

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ScaleByParamBlockRms {
    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (_, _, updates, params) = step.parts();
        if !self.0 {
            return Ok(());
        }
        for (i, p) in params.leaves().iter().enumerate() {
            let u = updates.take(i, params)?;
            let floor = p.device().try_ones_like(&())?.try_mul(scalar::<E>(1e-3))?;
            let scale = rms(p)?.try_maximum(floor)?.try_broadcast_like(u.shape())?;
            updates.set(i, u.try_mul(scale)?);
        }
        Ok(())
    }
}
