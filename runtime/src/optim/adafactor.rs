//! `adafactor` (Optax `adafactor`: `scale_by_factored_rms`,
//! `clip_by_block_rms`, the learning rate, `scale_by_param_block_rms`).

use super::{
    scale_by_factored_rms, scale_by_learning_rate, Alias, ClipByBlockRms, Scale,
    ScaleByFactoredRms, ScaleByLearningRate, ScaleByParamBlockRms,
};
use crate::schedule::Schedule;

/// Adafactor as Optax's `adafactor(learning_rate, min_dim_size_to_factor=128,
/// decay_rate=0.8, decay_offset=0, multiply_by_parameter_scale=True,
/// clipping_threshold=1.0, momentum=None, eps=1e-30, factored=True)`, per
/// parameter tensor:
///
/// - [`scale_by_factored_rms`]'s direction `u` (second moments factored
///   over the two largest dimensions of a large enough tensor);
/// - with a clipping threshold `c`, `u /= max(1, rms(u) / c)`;
/// - `u *= lr`, then with `multiply_by_parameter_scale`
///   `u *= max(rms(p), 1e-3)`; `updates = -u`.
///
/// `lr` is a constant or a [`Schedule`] evaluated at the update count. The
/// options without an equivalent here are Optax's `momentum` (default
/// `None`), `weight_decay_rate` (chain [`add_decayed_weights`](super::add_decayed_weights)
/// instead) and a missing learning rate. The update is dfdx tensor ops
/// on any device; norms and means stay on the device. State: `count`,
/// `v_row.<leaf>` and `v_col.<leaf>` or `v.<leaf>`.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::*;
///
/// let dev: Cpu = Default::default();
/// let mut model = dev.build_module::<Linear<3, 2>, f32>();
/// let tx = adafactor(1e-2).min_dim_size_to_factor(2);
/// let mut state = tx.init_model(&model).unwrap();
/// let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
/// let grads = model.forward(x.leaky_trace()).square().mean().backward();
/// tx.apply_model(&mut state, grads, &mut model).unwrap();
/// assert_eq!(state.count(), 1);
/// ```
pub fn adafactor<L: Schedule>(learning_rate: L) -> Adafactor<L> {
    Alias((
        scale_by_factored_rms(),
        ClipByBlockRms(Some(1.0)),
        scale_by_learning_rate(learning_rate).flip_sign(false),
        ScaleByParamBlockRms(true),
        Scale(-1.0),
    ))
}

/// The optimizer built by [`adafactor`].
///
/// ```
/// let tx: flaxen_runtime::optim::Adafactor<f64> = flaxen_runtime::optim::adafactor(1e-2);
/// # let _ = tx;
/// ```
pub type Adafactor<L> = Alias<(
    ScaleByFactoredRms,
    ClipByBlockRms,
    ScaleByLearningRate<L>,
    ScaleByParamBlockRms,
    Scale,
)>;

super::builders! { impl[L] Adafactor<L> {
    /// Factors a tensor's second moment only when its two largest
    /// dimensions are at least this size (default 128).
    min_dim_size_to_factor: usize => [0 .0 .min_dim_size_to_factor];
    /// The exponent of the second-moment decay schedule (default 0.8).
    decay_rate: f64 => [0 .0 .decay_rate];
    /// Subtracted from the step in the decay schedule, for fine-tuning
    /// (default 0).
    decay_offset: u64 => [0 .0 .decay_offset];
    /// Added to the squared gradient (default 1e-30).
    eps: f64 => [0 .0 .eps];
    /// Whether second moments may be factored at all (default `true`).
    factored: bool => [0 .0 .factored];
    /// Clips each tensor's update to this root mean square (default
    /// `Some(1.0)`; `None` does not clip).
    clipping_threshold: Option<f64> => [0 .1 .0];
    /// Scales each update by the root mean square of its parameter, at
    /// least 1e-3 (default `true`).
    multiply_by_parameter_scale: bool => [0 .3 .0];
}}
