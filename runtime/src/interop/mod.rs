//! Checkpoints of other frameworks in and out of flaxen models.
//!
//! - [`flax`]: Flax linen variables saved with `flax.serialization.to_bytes`.
//!
//! ```
//! use flaxen_runtime::interop::flax::SaveOptions;
//! let _ = SaveOptions::new();
//! ```

pub mod flax;
