//! `scale_by_lion` (Optax; Lion's direction).

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::{Device, TryAdd, TryMul};

use crate::dtype::scalar;
use crate::optim::alias::{Primitive, Step};
use crate::optim::state::Bufs;
use crate::optim::Params;

/// Optax's `scale_by_lion(b1=0.9, b2=0.99)`: `updates = sign((1 - b1) g +
/// b1 mu)`, then `mu = (1 - b2) g + b2 mu`. The sign is `clamp(x * 2^100,
/// -1, 1)`, Optax's except for `0 < |x| < 2^-100` (2^-15 in `f16`). A few
/// dfdx tensor ops per leaf, on any device. State: `count`, `mu.<leaf>`.
///
/// ```
/// let p = flaxen_runtime::optim::scale_by_lion().b1(0.95).b2(0.98);
/// # let _ = p;
/// ```
pub fn scale_by_lion() -> ScaleByLion {
    ScaleByLion { b1: 0.9, b2: 0.99 }
}

/// The primitive built by [`scale_by_lion`].
///
/// ```
/// let p: flaxen_runtime::optim::ScaleByLion = flaxen_runtime::optim::scale_by_lion();
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScaleByLion {
    pub(crate) b1: f64,
    pub(crate) b2: f64,
}

crate::optim::builders! { impl[] ScaleByLion {
    /// Weight of the moment in the update's sign (default 0.9).
    b1: f64 => [b1];
    /// Decay rate of the moment (default 0.99).
    b2: f64 => [b2];
}}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ScaleByLion {
    fn init(&self, params: &Params<E, D>) -> Result<Bufs<E, D>, D::Err> {
        Bufs::default().with_filled("mu", params, 0.0)
    }

    fn counted(&self) -> bool {
        true
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, state, updates, params) = step.parts();
        let cast = scalar::<E>;
        // sign(x) as clamp(x * 2^100, -1, 1): exact for 0, NaN (kept, as
        // Optax) and |x| >= 2^-100 (2^-15 in f16), in two cheap unary ops
        // (dfdx has no sign op; `choose` between tensors is ~10x slower).
        let big = Some(cast(2f64.powi(100)))
            .filter(|b| b.to_f64().is_some_and(f64::is_finite))
            .unwrap_or_else(|| cast(2f64.powi(15)));
        let bufs = state.part(at.k);
        for i in 0..params.len() {
            let g = updates.take(i, params)?;
            let mu = bufs.tensor(0, i).expect("every leaf has mu");
            // Optax's `(1 - b1) * g + b1 * m`, with `1 - b1` from f64.
            let x = g
                .clone()
                .try_mul(cast(1.0 - self.b1))?
                .try_add(mu.clone().try_mul(cast(self.b1))?)?;
            *mu = g
                .try_mul(cast(1.0 - self.b2))?
                .try_add(mu.clone().try_mul(cast(self.b2))?)?;
            updates.set(i, x.try_mul(big)?.try_clamp(-1.0, 1.0)?);
        }
        Ok(())
    }
}
