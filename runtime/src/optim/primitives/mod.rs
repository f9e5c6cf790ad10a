//! Optax's primitives, each a [`GradientTransformation`](super::GradientTransformation)
//! on its own and a member of the optimizers built from them
//! ([`Alias`](super::Alias)).

mod add_decayed_weights;
mod block_rms;
mod clip;
mod learning_rate;
mod scale;
mod scale_by_adam;
mod scale_by_belief;
mod scale_by_factored_rms;
mod scale_by_lion;
mod scale_by_rms;
mod scale_by_rss;
mod scale_by_trust_ratio;
mod trace;

pub use add_decayed_weights::{add_decayed_weights, AddDecayedWeights};
pub use block_rms::{
    clip_by_block_rms, scale_by_param_block_rms, ClipByBlockRms, ScaleByParamBlockRms,
};
pub use clip::{clip_by_global_norm, ClipByGlobalNorm};
pub use learning_rate::{
    scale_by_learning_rate, scale_by_schedule, ScaleByLearningRate, ScaleBySchedule,
};
pub use scale::{scale, Scale};
pub use scale_by_adam::{scale_by_adam, ScaleByAdam};
pub use scale_by_belief::{scale_by_belief, ScaleByBelief};
pub use scale_by_factored_rms::{scale_by_factored_rms, ScaleByFactoredRms};
pub use scale_by_lion::{scale_by_lion, ScaleByLion};
pub use scale_by_rms::{scale_by_rms, scale_by_stddev, ScaleByRms};
pub use scale_by_rss::{scale_by_rss, ScaleByRss};
pub use scale_by_trust_ratio::{scale_by_trust_ratio, ScaleByTrustRatio};
pub use trace::{trace, MomentumTrace};
