//! Parity of flaxen's conv and pooling layers with Flax (linen 0.12.8):
//! every case of `tests/fixtures/flax_conv_pool.json`, forward values and
//! the gradients of `loss = sum(y * loss_weights_r)` w.r.t. the input, the
//! kernel and the bias.
//!
//! Tolerance: `|ours - flax| <= 1e-4 * max(|flax|, 1)` per element, computed
//! in f32 (flaxen's CPU kernels, as JAX computes) and in f64.

use flaxen::prelude::*;

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/conv_pool.rs"]
mod conv_pool;

#[test]
fn conv_matches_flax_f32() {
    conv_pool::all_conv_cases!(&Cpu::default(), f32);
}

#[test]
fn conv_matches_flax_f64() {
    conv_pool::all_conv_cases!(&Cpu::default(), f64);
}

#[test]
fn pool_matches_flax_f32() {
    conv_pool::all_pool_cases!(&Cpu::default(), f32);
}

#[test]
fn pool_matches_flax_f64() {
    conv_pool::all_pool_cases!(&Cpu::default(), f64);
}
