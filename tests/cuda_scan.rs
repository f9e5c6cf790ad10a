//! `scan!` on dfdx's `Cuda` device.
//!
//! 1. `scan!(5, ..)` equals 5 plain calls of the step function, **bit for
//!    bit** (losses and parameters), for the MLP + dfdx Adam of
//!    `tests/scan.rs`. `scan!` only slices the stacked batches (`select` on
//!    the device for f32, a host copy for the `usize` labels; both exact
//!    copies) and calls the same step on the same device, so the two runs
//!    launch the same kernels on the same inputs. That gives equal bits
//!    wherever those kernels are deterministic, and for this model they are:
//!    cuBLAS gemms are bitwise reproducible for the same sizes on the same
//!    GPU and toolkit; every dfdx reduction here (bias gradients over a batch
//!    of 8, log-softmax over 3 classes, the mean over 8) fits in one thread
//!    block, where dfdx's `chunk_sum` is a fixed-order tree; and the only
//!    `atomicAdd`s (reductions of length <= 2, `select`'s backward) add at
//!    most one value, or two (commutative: `0 + a + b == 0 + b + a`), into
//!    each output. Adam and ReLU are elementwise.
//! 2. The Flax parity of `tests/scan_flax.rs` on Cuda: the DSL CNN, `adam(1e-3)`
//!    and `scan!(5)` over the fixture's 5 batches reproduce the 5 losses and
//!    the final parameters of `jax.lax.scan` within `1e-4 * max(|flax|, 1)`
//!    (the Cpu test's tolerance: XLA, cuBLAS and flaxen's CPU kernels all sum
//!    the convolutions in different orders, and Adam's first steps, update ≈
//!    lr · sign(g), amplify the rounding of tiny gradients).
//! 3. For that CNN, scan! vs 5 plain calls on Cuda is compared within a
//!    tolerance, not bit for bit: the conv layers on Cuda are flaxen's
//!    composite path, whose im2col `gather` has an `atomicAdd` backward with up
//!    to `kh * kw = 9` adds into one input cell (and dfdx's sum over
//!    `batch * positions` for the bias gradient spans several thread blocks,
//!    also joined by `atomicAdd`), so the order of those float additions, and
//!    with it the last bits of the gradients, can change from run to run.
//!    Tolerance: losses `|a - b| <= 1e-6 * max(|b|, 1)`, parameters
//!    `<= 1e-5 * max(|b|, 1)`; see the test for why these are ample.
//!
//! Without a GPU this file still has to compile: see docs/cuda.md.
#![cfg(feature = "cuda")]

use flaxen::prelude::*;
use flaxen::runtime::scan::Stacked;

// ------------------------------------------- 1. MLP, scan! == plain, exact

#[path = "common/mlp_adam.rs"]
mod mlp_adam;
use mlp_adam::{batches, init, params, plain_calls, stacked, train_step};

#[test]
fn cuda_scan_equals_k_plain_calls_bit_for_bit() {
    let cuda = Cuda::default();
    let bs = batches(7, 5);
    let (plain, plain_losses) = plain_calls(&cuda, 1, &bs);
    let (scanned, losses) = scan!(5, train_step, init(&cuda, 1), stacked::<5, _>(&cuda, &bs));
    let losses: Tensor<Rank1<5>, f32, Cuda> = losses;

    assert_eq!(scanned.steps, 5);
    assert_eq!(losses.array().to_vec(), plain_losses, "losses");
    assert_eq!(params(&scanned), params(&plain), "parameters");
    // Five sequential Adam updates really moved the parameters, and the
    // loss is finite.
    assert_ne!(params(&scanned), params(&init(&cuda, 1)));
    assert!(
        plain_losses.iter().all(|l| l.is_finite()),
        "{plain_losses:?}"
    );
}

/// `scan!` with a `const` K (the rolled form) on Cuda: also bit for bit.
#[test]
fn cuda_scan_with_const_k_equals_plain_calls() {
    const K: usize = 3;
    let cuda = Cuda::default();
    let bs = batches(7, K);
    let (scanned, losses) = scan!(K, train_step, init(&cuda, 2), stacked::<K, _>(&cuda, &bs));
    let (plain, plain_losses) = plain_calls(&cuda, 2, &bs);
    assert_eq!(losses.array().to_vec(), plain_losses);
    assert_eq!(params(&scanned), params(&plain));
}

/// Slicing stacked batches on Cuda is an exact copy, for f32 (device
/// `select`) and usize labels (host round trip).
#[test]
fn cuda_step_k_slices_exactly_one_batch() {
    let cpu = Cpu::seed_from_u64(3);
    let cuda = Cuda::default();
    let x: Tensor<Rank3<4, 2, 3>, f32, Cpu> = cpu.sample_normal();
    let y: Tensor<Rank2<4, 2>, usize, Cpu> = cpu.tensor([[0, 1], [2, 3], [4, 5], [6, 7]]);
    let stacked = (x.to_device(&cuda), y.to_device(&cuda));
    for k in 0..4 {
        let (xk, yk) = Stacked::<4>::step(&stacked, k);
        assert_eq!(xk.array(), x.array()[k]);
        assert_eq!(yk.array(), [2 * k, 2 * k + 1]);
    }
}

// ------------------------------------------------ 2. + 3. the Flax CNN

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/flax_cnn.rs"]
mod flax_cnn;

// The fixture's network, state, step and the Flax parity check, on Cuda (the
// same code `tests/scan_flax.rs` runs on the Cpu).
flax_cnn::small_cnn_on!(Cuda);

#[test]
fn cuda_scan5_reproduces_flax_losses_and_final_params() {
    scan5_matches_flax(&Cuda::default());
}

/// Tolerance (see the module docs for why not bit for bit): the only
/// run-to-run differences are the order of a few float additions in the
/// gradients, about an ulp (1e-7 relative) of the summands. Adam turns a
/// gradient difference `dg` into an update difference of at most
/// `lr * dg / (4 * eps)` when `|g|` is near `eps` and `lr * eps * dg / g^2`
/// otherwise; for the differences to reach 1e-5 a gradient component would
/// have to be ~1e-8 while its summands are ~1e-1, and the losses move only
/// through `g · dθ`, second order in those components. Measured on the Cpu
/// for this fixture: over the 5 steps the smallest nonzero gradient
/// component is 1.9e-7 and the largest 0.4 (about a third are exactly zero:
/// dead ReLU units, zero on every device), so `dθ` stays near 1e-8.
#[test]
fn cuda_cnn_scan_equals_plain_calls_within_rounding() {
    let f = flax_cnn::fixture();
    let cuda = Cuda::default();
    let n = 4 * 64;
    let mut plain = cnn_init(&cuda, &f);
    let mut plain_losses = Vec::new();
    for k in 0..5 {
        let x: Tensor<Rank4<4, 1, 8, 8>, f32, Cuda> =
            cuda.tensor(f.xs.data[k * n..(k + 1) * n].to_vec());
        let y: Tensor<Rank1<4>, usize, Cuda> = cuda.tensor(f.labels[k].clone());
        let (s, l) = cnn_step(plain, (x, y));
        plain = s;
        plain_losses.push(l.array());
    }

    let xs: Tensor<Rank5<5, 4, 1, 8, 8>, f32, Cuda> = cuda.tensor(f.xs.data.clone());
    let ys: Tensor<Rank2<5, 4>, usize, Cuda> = cuda.tensor(f.labels.concat());
    let (scanned, losses) = scan!(5, cnn_step, cnn_init(&cuda, &f), (xs, ys));

    fixture::assert_rel(
        "losses, scan vs plain",
        &losses.array(),
        &plain_losses,
        1e-6,
        1.0,
    );
    let (a, b) = (saved(&scanned), saved(&plain));
    assert_eq!(a.len(), b.len());
    for (k, want) in &b {
        fixture::assert_rel(
            &format!("{k}, scan vs plain"),
            &a[k].data,
            &want.data,
            1e-5,
            1.0,
        );
    }
    assert_eq!(scanned.step(), 5);
    assert_eq!(plain.step(), 5);
}
