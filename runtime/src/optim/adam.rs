//! `adam` and `adamw` (Optax `adam` / `adamw`): `scale_by_adam`,
//! `add_decayed_weights`, `scale_by_learning_rate`.

use super::{
    add_decayed_weights, scale_by_adam, scale_by_learning_rate, AddDecayedWeights, Alias,
    ScaleByAdam, ScaleByLearningRate,
};
use crate::schedule::Schedule;

/// Adam with Optax's defaults (`b1 = 0.9`, `b2 = 0.999`, `eps = 1e-8`,
/// `eps_root = 0`): `updates = -lr * m̂ / (sqrt(v̂) + eps)` with
/// `m̂ = m / (1 - b1^t)`, `v̂ = v / (1 - b2^t)`; Optax's
/// `chain(scale_by_adam(..), scale_by_learning_rate(lr))`.
///
/// `lr` is a constant or a [`Schedule`] evaluated at the update count
/// (0 for the first update). The arithmetic is Optax's, rounding
/// included (see [`scale_by_adam`]); on `Cpu` in `f32`/`f64` direction and
/// step run as one fused pass, bit for bit the primitives' result. `eps`
/// is outside the square root, as in Optax and PyTorch. State: `count`,
/// `mu.<leaf>`, `nu.<leaf>`.
///
/// ```
/// use flaxen_runtime::optim::adam;
/// let tx = adam(1e-3).b1(0.8).b2(0.99).eps(1e-6);
/// # let _ = tx;
/// ```
pub fn adam<L: Schedule>(learning_rate: L) -> Adam<L> {
    adamw(learning_rate, 0.0)
}

/// AdamW with Optax semantics: `updates = -lr * (adam_direction + wd *
/// params)`, i.e. the decay is added before the learning-rate scaling
/// (Optax's `scale_by_adam`, `add_decayed_weights`,
/// `scale_by_learning_rate`). It applies to every parameter unless
/// restricted with [`mask`](Adam::mask) (Optax's `mask` argument). Optax's
/// default `weight_decay` is `1e-4`.
///
/// ```
/// use flaxen_runtime::optim::adamw;
/// use flaxen_runtime::schedule::cosine_decay;
/// let tx = adamw(cosine_decay(1e-3, 1000, 0.0), 1e-4);
/// # let _ = tx;
/// ```
pub fn adamw<L: Schedule>(learning_rate: L, weight_decay: f64) -> Adam<L> {
    let mut decay = add_decayed_weights(weight_decay);
    decay.label = "adamw(..).mask";
    Alias((
        scale_by_adam(),
        decay,
        scale_by_learning_rate(learning_rate),
    ))
}

/// The optimizer built by [`adam`] and [`adamw`].
///
/// ```
/// let tx: flaxen_runtime::optim::Adam<f64> = flaxen_runtime::optim::adamw(1e-3, 1e-4);
/// # let _ = tx;
/// ```
pub type Adam<L> = Alias<(ScaleByAdam, AddDecayedWeights, ScaleByLearningRate<L>)>;

super::builders! { impl[L] Adam<L> {
    /// Decay rate of the first moment (default 0.9).
    b1: f64 => [0 .0 .b1];
    /// Decay rate of the second moment (default 0.999).
    b2: f64 => [0 .0 .b2];
    /// Added to the root of the second moment (default 1e-8).
    eps: f64 => [0 .0 .eps];
    /// With `true`, every update is dfdx's fused Adam kernel, i.e.
    /// PyTorch's arithmetic (`torch.optim.Adam`, `dfdx::optim::Adam`): the
    /// moment weights are `1 - b` computed in the dtype. In `f32` with
    /// `b2 = 0.999` each step is then ≈6.7e-6 (relative) larger than
    /// Optax's. The default, `false`, rounds as Optax on host buffers.
    pytorch_arithmetic: bool => [0 .0 .pytorch];
}}

impl<L> Adam<L> {
    /// Applies the weight decay only to the parameters whose checkpoint key
    /// `mask` selects (Optax's `adamw(..., mask=...)`); the Adam direction
    /// still updates every parameter. [`decay_mask`](super::decay_mask)
    /// leaves out biases and normalisation scales. The state is unchanged.
    ///
    /// With a mask (and a non-zero decay) [`apply_model`](super::GradientTransformation::apply_model)
    /// computes the updates then adds them, instead of running the fused
    /// kernel on the parameters.
    ///
    /// ```
    /// use flaxen_runtime::optim::{adamw, decay_mask};
    /// let tx = adamw(1e-3, 1e-2).mask(decay_mask);
    /// let head_only = adamw(1e-3, 1e-2).mask(|key: &str| key.starts_with("dense_1."));
    /// # let _ = (tx, head_only);
    /// ```
    pub fn mask(mut self, mask: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.0 .1 = self.0 .1.mask(mask);
        self
    }
}
