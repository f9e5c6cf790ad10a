//! `rmsprop` (Optax `rmsprop`: `scale_by_rms` or `scale_by_stddev`,
//! `scale_by_learning_rate`, `trace`).

use super::{
    scale_by_learning_rate, scale_by_rms, Alias, MomentumTrace, ScaleByLearningRate, ScaleByRms,
};
use crate::schedule::Schedule;

/// RMSProp as Optax's `rmsprop(learning_rate, decay=0.9, eps=1e-8)`:
/// `nu = decay * nu + (1 - decay) * g²`, `updates = -lr * g / sqrt(nu + eps)`
/// (Optax's default `eps_in_sqrt=True`, `initial_scale = 0`), with Optax's
/// options [`centered`](RmsProp::centered), [`momentum`](RmsProp::momentum)
/// and [`nesterov`](RmsProp::nesterov) (momentum after the learning rate,
/// Optax's `trace`).
///
/// On host buffers (`Cpu`, `f32`/`f64`) the update is Optax's arithmetic in
/// one pass. Elsewhere (CUDA, `f16`) it is dfdx's fused RMSprop kernel:
/// the same formulas, except that its momentum is applied before the
/// learning rate (PyTorch's order: equal to Optax's for a constant learning
/// rate, its `trace` saved divided by `-lr`) and that it has no Nesterov
/// momentum (there `nesterov` is classic momentum). State: `count`,
/// `nu.<leaf>`, `mu.<leaf>` (centred), `trace.<leaf>` (momentum).
///
/// ```
/// use flaxen_runtime::optim::rmsprop;
/// let tx = rmsprop(1e-2).decay(0.95).eps(1e-6).centered(true).momentum(0.9);
/// # let _ = tx;
/// ```
pub fn rmsprop<L: Schedule>(learning_rate: L) -> RmsProp<L> {
    Alias((
        scale_by_rms(),
        scale_by_learning_rate(learning_rate),
        MomentumTrace {
            momentum: None,
            nesterov: false,
        },
    ))
}

/// The optimizer built by [`rmsprop`].
///
/// ```
/// let tx: flaxen_runtime::optim::RmsProp<f64> = flaxen_runtime::optim::rmsprop(1e-2);
/// # let _ = tx;
/// ```
pub type RmsProp<L> = Alias<(ScaleByRms, ScaleByLearningRate<L>, MomentumTrace)>;

super::builders! { impl[L] RmsProp<L> {
    /// Decay rate of the averages (default 0.9).
    decay: f64 => [0 .0 .decay];
    /// Added inside the square root (default 1e-8).
    eps: f64 => [0 .0 .eps];
    /// Divides by the gradient's standard deviation instead of its root
    /// mean square (Optax's `scale_by_stddev`; default `false`).
    centered: bool => [0 .0 .centered];
    /// Nesterov momentum, with [`momentum`](RmsProp::momentum) (default
    /// `false`).
    nesterov: bool => [0 .2 .nesterov];
}}

impl<L> RmsProp<L> {
    /// Momentum on the scaled updates (Optax's `trace`; default none).
    ///
    /// ```
    /// let tx = flaxen_runtime::optim::rmsprop(1e-2).momentum(0.9).nesterov(true);
    /// # let _ = tx;
    /// ```
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.0 .2.momentum = Some(momentum);
        self
    }
}
