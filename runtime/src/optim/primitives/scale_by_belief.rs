//! `scale_by_belief` (Optax; AdaBelief's direction).

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::{Device, TryAdd, TryDiv, TryMul, TrySub};

use crate::dtype::scalar;
use crate::optim::alias::{Primitive, Step};
use crate::optim::state::Bufs;
use crate::optim::Params;

/// `1 - b^t` in the dtype from `b` rounded to
/// it (its power correctly rounded, `1 - x` rounded once), as Optax
/// computes bias corrections without `jax_enable_x64`.
fn bias_correction<E: Dtype>(b: f64, t: u64) -> E {
    let back = |x: E| x.to_f64().unwrap_or(f64::NAN);
    scalar::<E>(1.0 - back(scalar::<E>(back(scalar::<E>(b)).powf(t as f64))))
}

/// Optax's `scale_by_belief(b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16,
/// nesterov=False)`:
///
/// - `mu = (1 - b1) g + b1 mu`,
/// - `nu = (1 - b2) (g - mu)² + b2 nu + eps_root` (`eps_root` is added
///   to the stored `nu`, inside the square root),
/// - `updates = m̂ / (sqrt(nu / (1 - b2^t)) + eps)`, with `m̂ = mu / (1 -
///   b1^t)`, or with `nesterov` `m̂ = b1 mu / (1 - b1^(t+1)) + (1 - b1) g /
///   (1 - b1^t)`.
///
/// The weights `1 - b` are computed in `f64` and rounded to the dtype, the
/// bias corrections in the dtype. A few dfdx tensor ops per leaf, on any
/// device. State: `count`, `mu.<leaf>`, `nu.<leaf>`.
///
/// ```
/// use flaxen_runtime::optim::scale_by_belief;
/// let p = scale_by_belief().b1(0.8).eps_root(0.0);
/// # let _ = p;
/// ```
pub fn scale_by_belief() -> ScaleByBelief {
    ScaleByBelief {
        b1: 0.9,
        b2: 0.999,
        eps: 1e-16,
        eps_root: 1e-16,
        nesterov: false,
    }
}

/// The primitive built by [`scale_by_belief`]; its builder methods are
/// [`adabelief`](crate::optim::adabelief)'s.
///
/// ```
/// let p: flaxen_runtime::optim::ScaleByBelief = flaxen_runtime::optim::scale_by_belief();
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScaleByBelief {
    pub(crate) b1: f64,
    pub(crate) b2: f64,
    pub(crate) eps: f64,
    pub(crate) eps_root: f64,
    pub(crate) nesterov: bool,
}

crate::optim::builders! { impl[] ScaleByBelief {
    /// Decay rate of the first moment (default 0.9).
    b1: f64 => [b1];
    /// Decay rate of the prediction error's second moment (default 0.999).
    b2: f64 => [b2];
    /// Added to the root of the second moment, outside the square root
    /// (default 1e-16).
    eps: f64 => [eps];
    /// Added to the stored second moment at every step, inside the square
    /// root (default 1e-16).
    eps_root: f64 => [eps_root];
    /// Nesterov momentum (default `false`).
    nesterov: bool => [nesterov];
}}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ScaleByBelief {
    fn init(&self, params: &Params<E, D>) -> Result<Bufs<E, D>, D::Err> {
        Bufs::default()
            .with_filled("mu", params, 0.0)?
            .with_filled("nu", params, 0.0)
    }

    fn counted(&self) -> bool {
        true
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, state, updates, params) = step.parts();
        let t = at.count + 1;
        let cast = scalar::<E>;
        let (b1, b2) = (cast(self.b1), cast(self.b2));
        let (w1, w2) = (cast(1.0 - self.b1), cast(1.0 - self.b2));
        let (bc1, bc2): (E, E) = (bias_correction(self.b1, t), bias_correction(self.b2, t));
        let bufs = state.part(at.k);
        for i in 0..params.len() {
            let g = updates.take(i, params)?;
            let old_mu = bufs.tensor(0, i).expect("every leaf has mu").clone();
            let mu = g.clone().try_mul(w1)?.try_add(old_mu.try_mul(b1)?)?;
            let err = g.clone().try_sub(mu.clone())?;
            let old_nu = bufs.tensor(1, i).expect("every leaf has nu").clone();
            let mut nu = err
                .clone()
                .try_mul(err)?
                .try_mul(w2)?
                .try_add(old_nu.try_mul(b2)?)?;
            if self.eps_root != 0.0 {
                nu = nu.try_add(cast(self.eps_root))?;
            }
            let m_hat = if self.nesterov {
                let bc1_next = bias_correction::<E>(self.b1, t + 1);
                mu.clone()
                    .try_div(bc1_next)?
                    .try_mul(b1)?
                    .try_add(g.try_div(bc1)?.try_mul(w1)?)?
            } else {
                mu.clone().try_div(bc1)?
            };
            let denom = nu
                .clone()
                .try_div(bc2)?
                .try_sqrt()?
                .try_add(cast(self.eps))?;
            updates.set(i, m_hat.try_div(denom)?);
            *bufs.tensor(0, i).expect("every leaf has mu") = mu;
            *bufs.tensor(1, i).expect("every leaf has nu") = nu;
        }
        Ok(())
    }
}
