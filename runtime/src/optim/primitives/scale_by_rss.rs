//! `scale_by_rss` (Optax; Adagrad's direction).

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::{Device, TryAdd, TryMul};

use crate::dtype::scalar;
use crate::optim::alias::{Primitive, Step};
use crate::optim::state::Bufs;
use crate::optim::Params;

/// Optax's `scale_by_rss(initial_accumulator_value=0.1, eps=1e-7)`:
/// `sum_of_squares += g²`, `updates = g * rsqrt(sum_of_squares + eps)`.
/// Optax returns a zero scale where the accumulator is zero; here that only
/// differs with `initial_accumulator_value = 0` and `eps = 0` (then a leaf
/// whose gradients were all zero gets NaN). A few dfdx tensor ops per leaf,
/// on any device. State: `sum_of_squares.<leaf>`.
///
/// ```
/// let p = flaxen_runtime::optim::scale_by_rss().initial_accumulator_value(0.0).eps(1e-10);
/// # let _ = p;
/// ```
pub fn scale_by_rss() -> ScaleByRss {
    ScaleByRss {
        initial_accumulator_value: 0.1,
        eps: 1e-7,
    }
}

/// The primitive built by [`scale_by_rss`].
///
/// ```
/// let p: flaxen_runtime::optim::ScaleByRss = flaxen_runtime::optim::scale_by_rss();
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScaleByRss {
    pub(crate) initial_accumulator_value: f64,
    pub(crate) eps: f64,
}

crate::optim::builders! { impl[] ScaleByRss {
    /// Starting value of the accumulator (default 0.1).
    initial_accumulator_value: f64 => [initial_accumulator_value];
    /// Added to the accumulator inside the square root (default 1e-7).
    eps: f64 => [eps];
}}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ScaleByRss {
    fn init(&self, params: &Params<E, D>) -> Result<Bufs<E, D>, D::Err> {
        Bufs::default().with_filled("sum_of_squares", params, self.initial_accumulator_value)
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, state, updates, params) = step.parts();
        let bufs = state.part(at.k);
        for i in 0..params.len() {
            let g = updates.take(i, params)?;
            let sos = bufs.tensor(0, i).expect("every leaf has an accumulator");
            // Optax's order: `g² + t`, `rsqrt(t + eps) * g`.
            *sos = g.clone().try_square()?.try_add(sos.clone())?;
            let scale = sos
                .clone()
                .try_add(scalar::<E>(self.eps))?
                .try_sqrt()?
                .try_recip()?;
            updates.set(i, scale.try_mul(g)?);
        }
        Ok(())
    }
}
