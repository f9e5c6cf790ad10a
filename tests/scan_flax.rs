//! Flax parity of a whole `scan!`: the CNN of
//! `tests/fixtures/flax_cnn_scan5.json` in the DSL, `adam(1e-3)` and
//! `scan!(5)` over the fixture's 5 stacked batches reproduce the 5 losses and
//! the final parameters of `jax.lax.scan` with `optax.adam(1e-3)`.
//!
//! Tolerance: 1e-4, relative to max(1, |value|) — f32 on both sides, but XLA
//! and flaxen sum the convolutions in different orders, and Adam's first
//! steps (update ≈ lr · sign(g)) amplify rounding of tiny gradients.
//! `tests/cuda_scan.rs` runs the same check on Cuda.

use flaxen::prelude::*;

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/flax_cnn.rs"]
mod flax_cnn;

flax_cnn::small_cnn_on!(Cpu);

#[test]
fn scan5_reproduces_flax_losses_and_final_params() {
    scan5_matches_flax(&Cpu::default());
}
