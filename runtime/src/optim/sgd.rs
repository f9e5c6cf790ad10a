//! `sgd` with optional (Nesterov) momentum (Optax `sgd`: `trace`, then
//! `scale_by_learning_rate`).

use super::{scale_by_learning_rate, Alias, MomentumTrace, ScaleByLearningRate};
use crate::schedule::Schedule;

/// Stochastic gradient descent, as Optax's
/// `sgd(learning_rate, momentum, nesterov)`: with momentum `m` the trace is
/// `t = g + m * t` and the update `-lr * t` (Nesterov: `-lr * (g + m * t)`);
/// without, the update is `-lr * g`. One pass of dfdx's SGD kernel per
/// tensor. State: `count`, and with momentum `trace.<leaf>`.
///
/// ```
/// use flaxen_runtime::optim::sgd;
/// let plain = sgd(0.1, None, false);
/// let heavy_ball = sgd(0.1, Some(0.9), false);
/// let nesterov = sgd(0.1, Some(0.9), true);
/// # let _ = (plain, heavy_ball, nesterov);
/// ```
pub fn sgd<L: Schedule>(learning_rate: L, momentum: Option<f64>, nesterov: bool) -> Sgd<L> {
    Alias((
        MomentumTrace { momentum, nesterov },
        scale_by_learning_rate(learning_rate),
    ))
}

/// The optimizer built by [`sgd`].
///
/// ```
/// let tx: flaxen_runtime::optim::Sgd<f64> = flaxen_runtime::optim::sgd(0.1, None, false);
/// # let _ = tx;
/// ```
pub type Sgd<L> = Alias<(MomentumTrace, ScaleByLearningRate<L>)>;
