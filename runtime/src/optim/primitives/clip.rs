//! `clip_by_global_norm` (Optax), entirely on the device.

use crate::dtype::scalar;
use dfdx::prelude::*;
use dfdx::tensor_ops::Device;

use crate::optim::alias::{Primitive, Step};

/// Rescales the updates so that their global L2 norm (over all leaves) is at
/// most `max_norm` (Optax `clip_by_global_norm`).
///
/// The norm is a device scalar and the factor `max_norm / max(norm,
/// max_norm)` is computed and applied with tensor ops, so clipping never
/// waits for the device. Below the threshold the factor is exactly 1.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::*;
///
/// let dev: Cpu = Default::default();
/// let u = dev.tensor_from_vec(vec![3.0f32, 4.0], (2,));
/// let params = Params::from_leaves(
///     LeafInfo { names: vec!["w".into()], shapes: vec![vec![2]] },
///     vec![dev.zeros_like(&(2,))],
/// );
/// let mut updates = Updates::from_leaves(vec![u]);
/// let tx = clip_by_global_norm(1.0);
/// let mut state = tx.init(&params).unwrap();
/// tx.update(&mut state, &mut updates, &params).unwrap();
/// let v = updates.tensor(0, &params).unwrap().as_vec();
/// assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
/// ```
pub fn clip_by_global_norm(max_norm: f64) -> ClipByGlobalNorm {
    ClipByGlobalNorm(max_norm)
}

/// See [`clip_by_global_norm`].
///
/// ```
/// let tx = flaxen_runtime::optim::ClipByGlobalNorm(1.0);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ClipByGlobalNorm(pub f64);

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ClipByGlobalNorm {
    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (_, _, updates, params) = step.parts();
        if updates.is_empty() {
            return Ok(());
        }
        let max = scalar::<E>(self.0);
        let mut sq: Option<Tensor<Rank0, E, D>> = None;
        for i in 0..updates.len() {
            let s = updates.tensor(i, params)?.clone().try_square()?.try_sum()?;
            sq = Some(match sq {
                None => s,
                Some(acc) => acc.try_add(s)?,
            });
        }
        let norm = sq.expect("at least one leaf").try_sqrt()?;
        let dev = norm.device().clone();
        let ceiling = dev.tensor_from_vec(vec![max], ());
        let factor = norm.try_maximum(ceiling)?.try_recip()?.try_mul(max)?;
        for i in 0..updates.len() {
            let u = updates.take(i, params)?;
            let f = factor.clone().try_broadcast_like(u.shape())?;
            updates.set(i, u.try_mul(f)?);
        }
        Ok(())
    }
}
