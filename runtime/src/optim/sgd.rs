//! `sgd` with optional (Nesterov) momentum (Optax `sgd`).

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::{Device, Momentum, SgdConfig};

use super::fused::{load_count, save_count, Buffers};
use super::{GradientTransformation, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// Stochastic gradient descent, as Optax's
/// `sgd(learning_rate, momentum, nesterov)`: with momentum `m` the trace is
/// `t = g + m * t` and the update `-lr * t` (Nesterov: `-lr * (g + m * t)`);
/// without, the update is `-lr * g`.
///
/// ```
/// use flaxen_runtime::optim::sgd;
/// let plain = sgd(0.1, None, false);
/// let heavy_ball = sgd(0.1, Some(0.9), false);
/// let nesterov = sgd(0.1, Some(0.9), true);
/// # let _ = (plain, heavy_ball, nesterov);
/// ```
pub fn sgd<L: Schedule>(learning_rate: L, momentum: Option<f64>, nesterov: bool) -> Sgd<L> {
    Sgd {
        learning_rate,
        momentum,
        nesterov,
    }
}

/// The transformation built by [`sgd`].
#[derive(Debug, Clone)]
pub struct Sgd<L> {
    learning_rate: L,
    momentum: Option<f64>,
    nesterov: bool,
}

/// State of [`Sgd`]: the update count (for schedules) and the momentum trace.
#[derive(Debug, Clone)]
pub struct SgdState<E, D: dfdx::prelude::Storage<E>> {
    count: u64,
    buffers: Buffers<E, D>,
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for Sgd<L> {
    type State = SgdState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        // dfdx's kernel walks the velocity buffer even without momentum.
        let (names, unsaved): (&'static [&'static str], usize) = match self.momentum {
            Some(_) => (&["trace"], 0),
            None => (&[], 1),
        };
        Ok(SgdState {
            count: 0,
            buffers: Buffers::new(params, names, unsaved)?,
        })
    }

    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        let lr = self.learning_rate.value(state.count);
        state.count += 1;
        let cfg = SgdConfig {
            lr,
            momentum: self.momentum.map(|m| {
                if self.nesterov {
                    Momentum::Nesterov(m)
                } else {
                    Momentum::Classic(m)
                }
            }),
            weight_decay: None,
        };
        state.buffers.step(updates, params, |_, out, v, g| {
            cfg.try_update(out, v[0], g)
        })
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for SgdState<E, D> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(format!("{prefix}count"), self.count, out);
        self.buffers.save(prefix, out);
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let count = load_count(&format!("{prefix}count"), src)?;
        let fresh = self.buffers.prepare(prefix, src)?;
        self.count = count;
        self.buffers.commit(fresh);
        Ok(())
    }
}
