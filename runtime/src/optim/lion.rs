//! `lion` (Optax `lion`: `scale_by_lion`, `add_decayed_weights`,
//! `scale_by_learning_rate`).

use super::{
    add_decayed_weights, scale_by_learning_rate, scale_by_lion, AddDecayedWeights, Alias,
    ScaleByLearningRate, ScaleByLion,
};
use crate::schedule::Schedule;

/// Lion as Optax's `lion(learning_rate, b1=0.9, b2=0.99,
/// weight_decay=1e-3)`: `updates = -lr * (sign((1 - b1) g + b1 mu) + wd *
/// params)`, then `mu = (1 - b2) g + b2 mu` (see [`scale_by_lion`]; no
/// mask). State: `count`, `mu.<leaf>`.
///
/// ```
/// use flaxen_runtime::optim::lion;
/// let tx = lion(1e-4).b1(0.95).b2(0.98).weight_decay(1e-2);
/// # let _ = tx;
/// ```
pub fn lion<L: Schedule>(learning_rate: L) -> Lion<L> {
    Alias((
        scale_by_lion(),
        add_decayed_weights(1e-3),
        scale_by_learning_rate(learning_rate),
    ))
}

/// The optimizer built by [`lion`].
///
/// ```
/// let tx: flaxen_runtime::optim::Lion<f64> = flaxen_runtime::optim::lion(1e-4);
/// # let _ = tx;
/// ```
pub type Lion<L> = Alias<(ScaleByLion, AddDecayedWeights, ScaleByLearningRate<L>)>;

super::builders! { impl[L] Lion<L> {
    /// Weight of the moment in the update's sign (default 0.9).
    b1: f64 => [0 .0 .b1];
    /// Decay rate of the moment (default 0.99).
    b2: f64 => [0 .0 .b2];
    /// Weight decay (default 1e-3, Optax's).
    weight_decay: f64 => [0 .1 .weight_decay];
}}
