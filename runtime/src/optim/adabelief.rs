//! `adabelief` (Optax `adabelief`: `scale_by_belief`,
//! `scale_by_learning_rate`).

use super::{scale_by_belief, scale_by_learning_rate, Alias, ScaleByBelief, ScaleByLearningRate};
use crate::schedule::Schedule;

/// AdaBelief as Optax's `adabelief(learning_rate, b1=0.9, b2=0.999,
/// eps=1e-16, eps_root=1e-16, nesterov=False)`: `updates = -lr * u` with
/// [`scale_by_belief`]'s direction `u`. `lr` is a constant or a
/// [`Schedule`] evaluated at the update count (0 for the first update).
/// State: `count`, `mu.<leaf>`, `nu.<leaf>`.
///
/// ```
/// use flaxen_runtime::optim::adabelief;
/// let tx = adabelief(1e-3).b1(0.8).b2(0.99).eps(1e-8).eps_root(0.0).nesterov(true);
/// # let _ = tx;
/// ```
pub fn adabelief<L: Schedule>(learning_rate: L) -> AdaBelief<L> {
    Alias((scale_by_belief(), scale_by_learning_rate(learning_rate)))
}

/// The optimizer built by [`adabelief`].
///
/// ```
/// let tx: flaxen_runtime::optim::AdaBelief<f64> = flaxen_runtime::optim::adabelief(1e-3);
/// # let _ = tx;
/// ```
pub type AdaBelief<L> = Alias<(ScaleByBelief, ScaleByLearningRate<L>)>;

super::builders! { impl[L] AdaBelief<L> {
    /// Decay rate of the first moment (default 0.9).
    b1: f64 => [0 .0 .b1];
    /// Decay rate of the prediction error's second moment (default 0.999).
    b2: f64 => [0 .0 .b2];
    /// Added to the root of the second moment, outside the square root
    /// (default 1e-16, Optax's).
    eps: f64 => [0 .0 .eps];
    /// Added to the stored second moment at every step, inside the square
    /// root (default 1e-16, Optax's).
    eps_root: f64 => [0 .0 .eps_root];
    /// Nesterov momentum (default `false`).
    nesterov: bool => [0 .0 .nesterov];
}}
