//! A short training run on dfdx's `Cuda` device: the seed CNN adapted to the
//! embedded 8×8 digits (as `examples/train.rs` / `examples/multistep.rs`),
//! written with `#[compact]`, `adam(3e-3)` (`examples/train.rs`'s peak
//! lr), batches of 32 from the `Loader` on the device,
//! `next_stacked::<5>()` + `scan!(5, ..)`.
//!
//! 1. 100 steps (20 scans) on Cuda: the mean loss of the last 10 steps is
//!    less than a third of the mean of the first 5, and every loss is finite.
//!    Measured on the Cpu with the same seeds: 2.29 -> 0.38 (a factor of
//!    6.1; per-scan means of the last four scans 0.34..0.38), so the factor
//!    3 leaves room for a trajectory that rounding has moved.
//! 2. Cuda vs Cpu, same initial parameters (built on the Cpu, copied with
//!    `to_device`) and the same batches (the loader's order depends only on
//!    its seed): the losses of the first 10 steps (2 scans) agree within
//!    `|cuda - cpu| <= 1e-5 + 1e-4 * |cpu|` (`tests/cuda_smoke.rs`'s
//!    tolerance). Step 1 is a forward pass only (~1e-6 apart); later steps
//!    add Adam updates computed from gradients that differ by rounding. On
//!    the Cpu, perturbing every initial parameter by a relative ±1e-6 (ten
//!    times more than cuBLAS vs gemm rounding) moves the losses of the first
//!    20 steps by at most 4e-7 relative, so 1e-4 leaves a wide margin.
//!
//! Without a GPU this file still has to compile: see docs/cuda.md.
#![cfg(feature = "cuda")]

#[path = "common/cuda.rs"]
mod cuda_common;

use cuda_common::assert_close;
use flaxen::dfdx::nn::ToDevice;
use flaxen::prelude::*;

#[path = "common/flax_cnn.rs"]
mod flax_cnn;

flax_cnn::seed_cnn!(
    /// The seed CNN on 1×8×8 inputs (two 2×2 poolings leave 64×2×2 features).
    DigitsCnn: 8, conv(32, 64), dense(256), out(10)
);

const BATCH: usize = 32;
/// Seed of the initial weights (built on the Cpu) and of the data order.
const SEED: u64 = 0;

/// The same training code for each device.
macro_rules! on_device {
    ($m:ident, $dev:ty) => {
        mod $m {
            use super::*;

            pub type Dev = $dev;
            pub type Net = <DigitsCnn as BuildOnDevice<Dev, f32>>::Built;
            type State = TrainState<Net, flaxen::runtime::optim::Adam<f64>, f32, Dev>;
            type Batch = (
                Tensor<Rank4<BATCH, 1, 8, 8>, f32, Dev>,
                Tensor<Rank1<BATCH>, usize, Dev>,
            );

            flax_cnn::cross_entropy_step!(train_step(State, Batch) on Dev);

            /// `scans` calls of `scan!(5, ..)` from `net`; the losses of all
            /// `5 * scans` steps, in order.
            pub fn train(dev: &Dev, net: Net, scans: usize) -> Vec<f32> {
                let (train, _test) = flaxen::runtime::data::digits::load().unwrap();
                let mut loader: Loader<Rank3<1, 8, 8>, BATCH, f32, Dev> =
                    Loader::new(train, dev, LoaderConfig::new(SEED)).unwrap();
                let mut state = TrainState::create(net, adam(3e-3)).unwrap();
                let mut losses = Vec::with_capacity(5 * scans);
                for _ in 0..scans {
                    let batches = loader.next_stacked::<5>().unwrap();
                    let (next, l) = scan!(5, train_step, state, batches);
                    state = next;
                    losses.extend(l.array());
                }
                assert_eq!(state.step(), 5 * scans as u64);
                losses
            }
        }
    };
}

on_device!(on_cpu, Cpu);
on_device!(on_cuda, Cuda);

fn initial_net() -> on_cpu::Net {
    Cpu::seed_from_u64(SEED).build_module::<DigitsCnn, f32>()
}

fn mean(v: &[f32]) -> f32 {
    v.iter().sum::<f32>() / v.len() as f32
}

#[test]
fn cuda_digits_cnn_loss_falls_by_a_factor_of_three_in_100_steps() {
    let cuda = Cuda::default();
    let losses = on_cuda::train(&cuda, initial_net().to_device(&cuda), 20);
    assert_eq!(losses.len(), 100);
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    let (first, last) = (mean(&losses[..5]), mean(&losses[90..]));
    eprintln!("cuda: mean loss of steps 1-5 {first:.4}, of steps 91-100 {last:.4}");
    assert!(
        last * 3.0 < first,
        "loss went from {first} to {last}: {losses:?}"
    );
}

#[test]
fn cuda_losses_match_cpu_for_the_first_10_steps() {
    let cuda = Cuda::default();
    let net = initial_net();
    let gpu_net = net.to_device(&cuda);
    let cpu_losses = on_cpu::train(&Cpu::default(), net, 2);
    let cuda_losses = on_cuda::train(&cuda, gpu_net, 2);
    eprintln!("cpu  {cpu_losses:?}\ncuda {cuda_losses:?}");
    assert_close("losses, steps 1-10", &cpu_losses, &cuda_losses);
}
