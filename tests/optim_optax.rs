//! Every trace of `tests/fixtures/optax_traces.json` (Optax 0.2.8)
//! reproduced by flaxen's optimizers within 1e-5 relative, through both
//! apply paths (the runner, shared with `tests/cuda_optim.rs`, is in
//! `tests/common/mod.rs`).

mod common;

use flaxen::runtime::dfdx::prelude::*;

#[test]
fn every_optax_trace_is_reproduced() {
    common::every_optax_trace(&Cpu::default());
}
