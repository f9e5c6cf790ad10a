//! Runtime of flaxen: layers dfdx lacks on stable Rust, training state,
//! Optax-style optimizers, losses, metrics, data, checkpoints and logging.
//!
//! Most users depend on the `flaxen` facade crate and `use flaxen::prelude::*`.

pub use dfdx;

#[macro_use]
mod simd;

pub mod activations;
pub mod checkpoint;
pub mod data;
pub mod guard;
pub mod interop;
pub mod layers;
pub mod logging;
pub mod losses;
pub mod malloc;
pub mod metrics;
pub mod optim;
pub mod profile;
pub mod run_lock;
pub mod scan;
pub mod schedule;
pub mod state;
pub mod train_state;

/// Everything a flaxen user needs in scope (re-exported by `flaxen::prelude`).
pub mod prelude {
    // As in dfdx's prelude (where `Linear` is the builder), `Conv2D` here is
    // the builder; the built module is `flaxen_runtime::layers::Conv2D`.
    pub use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointManager};
    pub use crate::data::{
        digits, ArrayDataset, DataError, Dataset, Loader, LoaderConfig, LoaderState,
    };
    pub use crate::guard::{check_finite, GuardError};
    pub use crate::layers::builder::Conv2D;
    pub use crate::layers::{
        conv_out_size, same_padding, AvgPool2D, ConvGeometry, Flatten2D, FlaxenDevice, MaxPool2D,
        NoInputGrad, PoolKind, Window2D,
    };
    pub use crate::logging::{LoggingError, MetricsLogger, Progress};
    pub use crate::losses::{
        mse, sigmoid_binary_cross_entropy, softmax_cross_entropy,
        softmax_cross_entropy_with_integer_labels, squared_error,
    };
    pub use crate::metrics::Metrics;
    pub use crate::optim::{
        adabelief, adafactor, adagrad, adam, adamw, add_decayed_weights, apply_if_finite,
        apply_updates, chain, clip_by_global_norm, decay_mask, identity, lamb, lion, masked,
        multi_steps, multi_transform, rmsprop, scale, scale_by_schedule, set_to_zero, sgd,
        GradientTransformation, OptimError,
    };
    pub use crate::scan::{stack_batches, SelectStep, Stacked};
    pub use crate::schedule::{
        constant, cosine_decay, exponential_decay, linear, piecewise_constant, warmup_cosine_decay,
        Schedule,
    };
    pub use crate::state::{StateDict, StateError, StateMap};
    pub use crate::train_state::{Loss, TrainState};
}

pub mod compact;
