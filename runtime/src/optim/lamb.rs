//! `lamb` (Optax `lamb`: `scale_by_adam`, `add_decayed_weights`,
//! `scale_by_trust_ratio`, then the learning rate).

use super::{
    add_decayed_weights, scale_by_adam, scale_by_learning_rate, AddDecayedWeights, Alias,
    ScaleByAdam, ScaleByLearningRate, ScaleByTrustRatio,
};
use crate::schedule::Schedule;

/// LAMB as Optax's `lamb(learning_rate, b1=0.9, b2=0.999, eps=1e-6,
/// eps_root=0.0, weight_decay=0.0, mask=None)`, per parameter tensor:
///
/// - Adam's direction `u = m̂ / (sqrt(v̂ + eps_root) + eps)`
///   ([`scale_by_adam`]);
/// - the weight decay `u += weight_decay * p` (on the parameters the
///   [`mask`](Lamb::mask) selects, all by default);
/// - the trust ratio `u *= ‖p‖ / ‖u‖` (Euclidean norms of the whole
///   tensor), or `u` unchanged when either norm is zero;
/// - `updates = -lr * u`.
///
/// `lr` is a constant or a [`Schedule`] evaluated at the update count (0
/// for the first update). The norms and the trust ratio stay on the
/// device. State: `count`, `mu.<leaf>`, `nu.<leaf>`.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::*;
///
/// let dev: Cpu = Default::default();
/// let mut model = dev.build_module::<Linear<3, 2>, f32>();
/// let tx = lamb(1e-3).weight_decay(1e-2).mask(decay_mask);
/// let mut state = tx.try_init_model(&model).unwrap();
/// let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
/// let grads = model.forward(x.leaky_trace()).square().mean().backward();
/// tx.apply_model(&mut state, grads, &mut model).unwrap();
/// assert_eq!(state.count(), 1);
/// ```
pub fn lamb<L: Schedule>(learning_rate: L) -> Lamb<L> {
    let mut decay = add_decayed_weights(0.0);
    decay.label = "lamb(..).mask";
    Alias((
        scale_by_adam().eps(1e-6),
        decay,
        ScaleByTrustRatio,
        scale_by_learning_rate(learning_rate),
    ))
}

/// The optimizer built by [`lamb`].
///
/// ```
/// let tx: flaxen_runtime::optim::Lamb<f64> = flaxen_runtime::optim::lamb(1e-3);
/// # let _ = tx;
/// ```
pub type Lamb<L> = Alias<(
    ScaleByAdam,
    AddDecayedWeights,
    ScaleByTrustRatio,
    ScaleByLearningRate<L>,
)>;

super::builders! { impl[L] Lamb<L> {
    /// Decay rate of the first moment (default 0.9).
    b1: f64 => [0 .0 .b1];
    /// Decay rate of the second moment (default 0.999).
    b2: f64 => [0 .0 .b2];
    /// Added to the root of the second moment (default 1e-6).
    eps: f64 => [0 .0 .eps];
    /// Added to `v̂` inside the square root (default 0).
    eps_root: f64 => [0 .0 .eps_root];
    /// Weight decay added before the trust ratio (default 0).
    weight_decay: f64 => [0 .1 .weight_decay];
}}

impl<L> Lamb<L> {
    /// Applies the weight decay only to the parameters whose checkpoint key
    /// `mask` selects (Optax's `mask`).
    ///
    /// ```
    /// use flaxen_runtime::optim::{decay_mask, lamb};
    /// let tx = lamb(1e-3).weight_decay(1e-2).mask(decay_mask);
    /// # let _ = tx;
    /// ```
    pub fn mask(mut self, mask: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.0 .1 = self.0 .1.mask(mask);
        self
    }
}
