//! Runtime of flaxen: layers dfdx lacks on stable Rust, training state,
//! Optax-style optimizers, losses, metrics, data, checkpoints and logging.
//!
//! Most users depend on the `flaxen` facade crate and `use flaxen::prelude::*`.

pub use dfdx;

pub mod state;

/// Everything a flaxen user needs in scope (re-exported by `flaxen::prelude`).
pub mod prelude {
    pub use crate::state::{StateDict, StateError, StateMap};
}

pub mod compact;
