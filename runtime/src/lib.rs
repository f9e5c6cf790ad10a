//! Runtime of flaxen: layers dfdx lacks on stable Rust, training state,
//! Optax-style optimizers, losses, metrics, data, checkpoints and logging.
//!
//! Most users depend on the `flaxen` facade crate and `use flaxen::prelude::*`;
//! this crate has no prelude of its own.

pub use dfdx;

#[macro_use]
mod simd;

pub mod activations;
pub mod checkpoint;
pub mod data;
pub mod dist;
pub mod dtype;
pub mod guard;
pub mod init;
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
pub mod threads;
pub mod train_state;

pub mod compact;
