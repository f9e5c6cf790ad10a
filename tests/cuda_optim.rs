//! Every trace of `tests/fixtures/optax_traces.json` (Optax 0.2.8) reproduced
//! by flaxen's optimizers on dfdx's `Cuda` device, through both apply paths
//! (`update_model` + `apply_updates`, and the fused in-place `apply_model`
//! that `TrainState` uses), as `tests/optim_optax.rs` does on `Cpu`.
//!
//! Tolerance: the Cpu test's, `|cuda - optax| <= 1e-5 * max(|optax|, 1e-2)`
//! per element after every step. Why Cuda needs nothing looser: the fixture
//! gives the gradients, and `grads_of` reproduces them exactly on the device
//! (the backward of `sum(w * g)` is `g` times one), so no matmul or
//! reduction order enters the gradients. What differs from the CPU is inside
//! dfdx's fused elementwise kernels (compiled by nvcc without fast-math, so
//! IEEE `sqrtf` and division): `powf(beta, t)` instead of `powi`, a division
//! instead of a multiplication by the reciprocal, and fused multiply-adds,
//! each worth an ulp or two of the *update*; the updates are at most `lr`
//! (1e-1 for sgd, 1e-2..1e-3 for the others) times O(1), so after the 12
//! steps of a trace the parameters differ from the Cpu's by ~1e-8 at most,
//! inside 1e-7 (the smallest tolerance, at the 1e-2 floor); every fixture
//! gradient is at least 1.6e-3 in magnitude, far from Adam's eps (1e-8),
//! so no near-zero gradient amplifies a rounding difference. `clip_by_global_norm` sums squares
//! with a block reduction in another order than the CPU: again an ulp.
//!
//! Without a GPU this file still has to compile: see docs/cuda.md.
#![cfg(feature = "cuda")]

mod common;

use flaxen::runtime::dfdx::prelude::*;

#[test]
fn every_optax_trace_is_reproduced_on_cuda() {
    common::every_optax_trace(&Cuda::default());
}
