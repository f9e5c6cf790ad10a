//! Runtime of flaxen: layers dfdx lacks on stable Rust, training state,
//! Optax-style optimizers, losses, metrics, data, checkpoints and logging.
//!
//! Most users depend on the `flaxen` facade crate and `use flaxen::prelude::*`.

pub use dfdx;

pub mod layers;
pub mod state;

/// Everything a flaxen user needs in scope (re-exported by `flaxen::prelude`).
pub mod prelude {
    // As in dfdx's prelude (where `Linear` is the builder), `Conv2D` here is
    // the builder; the built module is `flaxen_runtime::layers::Conv2D`.
    pub use crate::layers::builder::Conv2D;
    pub use crate::layers::{
        conv_out_size, same_padding, AvgPool2D, ConvGeometry, Flatten2D, FlaxenDevice, MaxPool2D,
        PoolKind, Window2D,
    };
    pub use crate::state::{StateDict, StateError, StateMap};
}
