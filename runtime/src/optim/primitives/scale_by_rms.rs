//! `scale_by_rms` and `scale_by_stddev` (Optax).

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::Device;

use crate::optim::alias::{Primitive, Step};
use crate::optim::exact::RmsConsts;
use crate::optim::fused::{rms_extra, Fusion, Plan};
use crate::optim::state::Bufs;
use crate::optim::Params;

/// Optax's `scale_by_rms(decay=0.9, eps=1e-8)` (`eps_in_sqrt=True`,
/// `initial_scale=0`): `nu = decay * nu + (1 - decay) * g²`, `updates = g *
/// rsqrt(nu + eps)`. State: `nu.<leaf>`.
///
/// Optax's arithmetic in one host pass on `Cpu` in `f32`/`f64`; dfdx's fused
/// RMSprop kernel elsewhere (the same formulas).
///
/// ```
/// use flaxen_runtime::optim::{chain, scale_by_learning_rate, scale_by_rms};
/// let tx = chain((scale_by_rms().decay(0.95), scale_by_learning_rate(1e-2)));
/// # let _ = tx;
/// ```
pub fn scale_by_rms() -> ScaleByRms {
    ScaleByRms {
        decay: 0.9,
        eps: 1e-8,
        centered: false,
    }
}

/// Optax's `scale_by_stddev(decay=0.9, eps=1e-8)`: [`scale_by_rms`]
/// centred by the gradient's average `mu = decay * mu + (1 - decay) * g`,
/// `updates = g * rsqrt(nu - mu² + eps)`. State: `nu.<leaf>`, `mu.<leaf>`.
///
/// ```
/// let p = flaxen_runtime::optim::scale_by_stddev().eps(1e-6);
/// # let _ = p;
/// ```
pub fn scale_by_stddev() -> ScaleByRms {
    ScaleByRms {
        centered: true,
        ..scale_by_rms()
    }
}

/// The primitive built by [`scale_by_rms`] and [`scale_by_stddev`].
///
/// ```
/// let p: flaxen_runtime::optim::ScaleByRms = flaxen_runtime::optim::scale_by_rms();
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScaleByRms {
    pub(crate) decay: f64,
    pub(crate) eps: f64,
    pub(crate) centered: bool,
}

crate::optim::builders! { impl[] ScaleByRms {
    /// Decay rate of the averages (default 0.9).
    decay: f64 => [decay];
    /// Added inside the square root (default 1e-8).
    eps: f64 => [eps];
}}

impl ScaleByRms {
    /// Alone: the kernel with a learning rate of -1 and no momentum.
    fn consts(&self) -> RmsConsts {
        RmsConsts {
            lr: -1.0,
            decay: self.decay,
            eps: self.eps,
            centered: self.centered,
            momentum: None,
            nesterov: false,
        }
    }
}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ScaleByRms {
    fn init(&self, _params: &Params<E, D>) -> Result<Bufs<E, D>, D::Err> {
        let bufs = Bufs::default().with_map("nu");
        Ok(match self.centered {
            true => bufs.with_map("mu"),
            false => bufs,
        })
    }

    fn extra(&self, host: bool) -> usize {
        rms_extra(&self.consts(), host)
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, state, updates, params) = step.parts();
        state.kernel_step(at.k..at.k + 1, &Plan::Rms(self.consts()), updates, params)
    }

    fn fusion(&self, _count: u64) -> Fusion {
        Fusion::Rms {
            decay: self.decay,
            eps: self.eps,
            centered: self.centered,
        }
    }
}
