//! # flaxen
//!
//! Flax-style `#[compact]` models and a `jax.lax.scan`-style fixed K-step
//! training loop on [dfdx], with every shape checked at compile time, on
//! stable Rust, on the CPU and on dfdx's CUDA device.
//!
//! Start with `use flaxen::prelude::*;`.

pub use flaxen_macros::*;
pub use flaxen_runtime as runtime;
pub use flaxen_runtime::dfdx;

/// Everything needed to write and train a model: dfdx's prelude, the runtime
/// and the macros.
pub mod prelude {
    pub use flaxen_macros::*;
    pub use flaxen_runtime::dfdx::prelude::*;
    pub use flaxen_runtime::prelude::*;
}

/// Paths used by code that the macros generate. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use ::core;
    pub use flaxen_runtime;
    pub use flaxen_runtime::compact::{scalar, try_silu, Compact, ParamDtype};
    pub use flaxen_runtime::dfdx;
}
