//! Runtime of flaxen: layers dfdx lacks on stable Rust, training state,
//! Optax-style optimizers, losses, metrics, data, checkpoints and logging.
//!
//! Most users depend on the `flaxen` facade crate and `use flaxen::prelude::*`.

pub use dfdx;

pub mod checkpoint;
pub mod data;
pub mod guard;
pub mod logging;
pub mod state;

/// Everything a flaxen user needs in scope (re-exported by `flaxen::prelude`).
pub mod prelude {
    pub use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointManager};
    pub use crate::data::{
        digits, ArrayDataset, DataError, Dataset, Loader, LoaderConfig, LoaderState,
    };
    pub use crate::guard::{check_finite, GuardError};
    pub use crate::logging::{LoggingError, MetricsLogger, Progress};
    pub use crate::state::{StateDict, StateError, StateMap};
}
