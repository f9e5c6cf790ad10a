//! `adagrad` (Optax `adagrad`: `scale_by_rss`, `scale_by_learning_rate`).

use super::{scale_by_learning_rate, scale_by_rss, Alias, ScaleByLearningRate, ScaleByRss};
use crate::schedule::Schedule;

/// Adagrad as Optax's `adagrad(learning_rate, initial_accumulator_value=0.1,
/// eps=1e-7)`: `sum_of_squares += g²`, `updates = -lr * g /
/// sqrt(sum_of_squares + eps)` (see [`scale_by_rss`]). State: `count`,
/// `sum_of_squares.<leaf>`.
///
/// ```
/// use flaxen_runtime::optim::adagrad;
/// let tx = adagrad(1e-2).initial_accumulator_value(0.0).eps(1e-10);
/// # let _ = tx;
/// ```
pub fn adagrad<L: Schedule>(learning_rate: L) -> Adagrad<L> {
    Alias((scale_by_rss(), scale_by_learning_rate(learning_rate)))
}

/// The optimizer built by [`adagrad`].
///
/// ```
/// let tx: flaxen_runtime::optim::Adagrad<f64> = flaxen_runtime::optim::adagrad(1e-2);
/// # let _ = tx;
/// ```
pub type Adagrad<L> = Alias<(ScaleByRss, ScaleByLearningRate<L>)>;

super::builders! { impl[L] Adagrad<L> {
    /// Starting value of the accumulator (default 0.1).
    initial_accumulator_value: f64 => [0 .0 .initial_accumulator_value];
    /// Added to the accumulator inside the square root (default 1e-7).
    eps: f64 => [0 .0 .eps];
}}
