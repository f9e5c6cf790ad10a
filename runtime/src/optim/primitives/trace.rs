//! `trace` (Optax): momentum.

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::{Device, Momentum, SgdConfig};

use crate::optim::alias::{Primitive, Step};
use crate::optim::fused::{Fusion, Plan};
use crate::optim::state::Bufs;
use crate::optim::Params;

/// Optax's `trace(decay, nesterov)`: `trace = g + decay * trace`, `updates
/// = trace` (or `g + decay * trace` with `nesterov`), on dfdx's SGD kernel.
/// State: `trace.<leaf>`. [`sgd`](crate::optim::sgd) with momentum is
/// `trace` then the learning rate.
///
/// ```
/// use flaxen_runtime::optim::{chain, scale_by_learning_rate, trace};
/// let tx = chain((trace(0.9, true), scale_by_learning_rate(0.1)));
/// # let _ = tx;
/// ```
pub fn trace(decay: f64, nesterov: bool) -> MomentumTrace {
    MomentumTrace {
        momentum: Some(decay),
        nesterov,
    }
}

/// The primitive built by [`trace`] (`None`: no momentum, a no-op).
///
/// ```
/// let p: flaxen_runtime::optim::MomentumTrace = flaxen_runtime::optim::trace(0.9, false);
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MomentumTrace {
    pub(crate) momentum: Option<f64>,
    pub(crate) nesterov: bool,
}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for MomentumTrace {
    fn init(&self, _params: &Params<E, D>) -> Result<Bufs<E, D>, D::Err> {
        Ok(match self.momentum {
            Some(_) => Bufs::default().with_map("trace"),
            None => Bufs::default(),
        })
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, state, updates, params) = step.parts();
        let Some(m) = self.momentum else {
            return Ok(());
        };
        // `param -= -1 * velocity` on a zeroed tensor leaves the trace.
        let kernel = Plan::Sgd(SgdConfig {
            lr: -1.0,
            momentum: Some(match self.nesterov {
                true => Momentum::Nesterov(m),
                false => Momentum::Classic(m),
            }),
            weight_decay: None,
        });
        state.kernel_step(at.k..at.k + 1, &kernel, updates, params)
    }

    fn fusion(&self, _count: u64) -> Fusion {
        match self.momentum {
            Some(momentum) => Fusion::Trace {
                momentum,
                nesterov: self.nesterov,
            },
            None => Fusion::Skip,
        }
    }
}
