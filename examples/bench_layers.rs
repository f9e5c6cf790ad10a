//! Training throughput of two small CNNs built by hand from flaxen's layers
//! (`Conv2D`, `Relu`, `AvgPool2D`, `Flatten2D`, `Dense`), trained with
//! dfdx's Adam (lr 1e-3) on random 1x28x28 inputs, batch 32. Prints one JSON line per workload.
//!
//! ```text
//! cargo run --release --example bench_layers            # full run
//! cargo run --release --example bench_layers -- --quick # smoke run (CI)
//! ```
//! (`FLAXEN_BENCH_QUICK=1` does the same as `--quick`; `--only W2` runs one
//! workload; `--only GEMM` measures flaxen's GEMM on a 2048^2 product, the
//! ceiling `bench/compare.sh` holds the workloads against; `--profile TEXT`
//! prints where 20 of TEXT's training steps go, layer by layer, with
//! `flaxen::runtime::profile`, and measures nothing.)
//!
//! On Linux with glibc the benchmark first tells malloc to keep freed memory
//! with `flaxen::runtime::malloc::keep_freed_memory()` (`--system-malloc`
//! skips this): dfdx allocates fresh buffers for every
//! activation and gradient each step, and glibc hands blocks over 128 KiB
//! back to the kernel on free, so each step would page-fault all of them in
//! again (measured: a third of W1's step). XLA avoids this with its own
//! arena. The same effect is available to any program without code, e.g.
//! `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295`.
//!
//! FLOPs per training sample: 2 * MACs for the forward pass of every conv and
//! dense layer, twice that again for the backward pass (input and weight
//! gradients), except the input gradient of the first layer, which training
//! does not need. Elementwise work (bias, ReLU, pooling, loss, Adam) is not
//! counted. That gives W1 = 1.279 MFLOP and W2 = 27.41 MFLOP per sample.

use std::time::Instant;

#[path = "bench/resize.rs"]
mod resize_bench;
#[path = "bench/rnn.rs"]
mod rnn;
#[path = "bench/attention.rs"]
mod text;

use flaxen::dfdx::losses::cross_entropy_with_logits_loss;
use flaxen::dfdx::optim::Optimizer;
use flaxen::dfdx::optim::{Adam, AdamConfig};
use flaxen::prelude::*;
use flaxen::runtime::layers::builder::Conv2D;
use flaxen::runtime::layers::builder::Dense;
use flaxen::runtime::layers::{AvgPool2D, Flatten2D, NoInputGrad, Relu};

const BATCH: usize = 32;

type Conv1 = Conv2D<1, 32, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28, 28, 28>;
type Pool1 = AvgPool2D<32, 2, 2, 2, 2, 0, 0, 0, 0, 28, 28, 14, 14>;
type Conv2 = Conv2D<32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14, 14, 14>;
type Pool2 = AvgPool2D<64, 2, 2, 2, 2, 0, 0, 0, 0, 14, 14, 7, 7>;

/// Conv 32 3x3 SAME -> relu -> avg_pool 2/2 -> flatten -> Dense 10.
type W1 = (
    Conv1,
    Relu,
    Pool1,
    Flatten2D<32, 14, 14, 6272>,
    Dense<6272, 10>,
);

/// Conv 32 3x3 SAME -> relu -> avg_pool 2/2 -> Conv 64 3x3 SAME -> relu ->
/// avg_pool 2/2 -> flatten -> Dense 256 -> relu -> Dense 10.
type W2 = (
    (Conv1, Relu, Pool1),
    (Conv2, Relu, Pool2),
    (
        Flatten2D<64, 7, 7, 3136>,
        Dense<3136, 256>,
        Relu,
        Dense<256, 10>,
    ),
);

/// W2's stem, then the grouped, dilated and transposed convolutions of
/// Flax's `Conv(feature_group_count, kernel_dilation)` and `ConvTranspose`:
/// depthwise 3x3 -> relu -> Conv 64 3x3 dilated 2 -> relu -> ConvTranspose
/// 16 3x3 stride 2 (14 -> 28) -> relu -> avg_pool 4/4 -> flatten -> Dense 10.
/// The dilated conv does W2's Conv2 FLOPs, so their rates compare.
type W3 = (
    (Conv1, Relu, Pool1),
    (
        flaxen::runtime::layers::builder::ConvGeneral2D<
            32,
            1,
            32,
            3,
            3,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            14,
            14,
            14,
            14,
        >,
        Relu,
        flaxen::runtime::layers::builder::ConvGeneral2D<
            32,
            32,
            64,
            3,
            3,
            2,
            2,
            1,
            1,
            2,
            2,
            2,
            2,
            14,
            14,
            14,
            14,
        >,
        Relu,
    ),
    (
        flaxen::runtime::layers::builder::ConvTranspose2D<
            64,
            16,
            3,
            3,
            1,
            1,
            2,
            2,
            2,
            1,
            2,
            1,
            14,
            14,
            28,
            28,
        >,
        Relu,
        AvgPool2D<16, 4, 4, 4, 4, 0, 0, 0, 0, 28, 28, 7, 7>,
        Flatten2D<16, 7, 7, 784>,
        Dense<784, 10>,
    ),
);

/// Forward FLOPs (2 * MACs) of a conv layer on one sample.
fn conv_flops(c: usize, o: usize, k: usize, oh: usize, ow: usize) -> f64 {
    2.0 * (c * o * k * oh * ow) as f64
}

fn dense_flops(i: usize, o: usize) -> f64 {
    2.0 * (i * o) as f64
}

/// Training FLOPs: forward, plus weight and input gradients (2x forward),
/// less the input gradient of the first layer.
fn train_flops(forward_per_layer: &[f64]) -> f64 {
    3.0 * forward_per_layer.iter().sum::<f64>() - forward_per_layer[0]
}

macro_rules! bench {
    ($name:literal, $model:ty, $flops:expr, $warmup:expr, $steps:expr) => {{
        let dev: Cpu = Default::default();
        let mut model = dev.build_module::<$model, f32>();
        let mut opt = Adam::new(
            &model,
            AdamConfig {
                lr: 1e-3,
                ..Default::default()
            },
        );
        let batches: Vec<(Tensor<Rank4<BATCH, 1, 28, 28>, f32, Cpu>, Tensor<Rank2<BATCH, 10>, f32, Cpu>)> =
            (0..4)
                .map(|_| {
                    let labels: Vec<f32> = (0..BATCH * 10)
                        .map(|i| if i % 10 == (i / 10 * 7) % 10 { 1.0 } else { 0.0 })
                        .collect();
                    (dev.sample_normal(), dev.tensor_from_vec(labels, Default::default()))
                })
                .collect();
        let mut grads = model.alloc_grads();
        let mut last_loss = 0.0f32;
        let mut step = |i: usize, grads: Gradients<f32, Cpu>| {
            let (x, y) = &batches[i % batches.len()];
            // The input batch needs no gradient (see `NoInputGrad`).
            let logits = model.forward_mut(NoInputGrad(x.clone().traced(grads)));
            let loss = cross_entropy_with_logits_loss(logits, y.clone());
            last_loss = loss.array();
            let mut grads = loss.backward();
            opt.update(&mut model, &grads).expect("every parameter has a gradient");
            model.zero_grads(&mut grads);
            grads
        };
        for i in 0..$warmup {
            grads = step(i, grads);
        }
        let start = Instant::now();
        for i in 0..$steps {
            grads = step(i, grads);
        }
        let secs = start.elapsed().as_secs_f64();
        assert!(last_loss.is_finite(), "{} diverged", $name);
        let step_ms = secs * 1e3 / $steps as f64;
        let samples_per_s = (BATCH * $steps) as f64 / secs;
        println!(
            "{{\"workload\":\"{}\",\"batch\":{},\"samples_per_s\":{:.0},\"gflop_per_s\":{:.1},\"step_ms\":{:.3}}}",
            $name,
            BATCH,
            samples_per_s,
            samples_per_s * $flops / 1e9,
            step_ms
        );
    }};
}

/// flaxen's own GEMM at the machine's limit: a `Dense<2048, 2048>` forward
/// on a batch of 2048 (one 2048 x 2048 x 2048 product through the same
/// kernel the layers use, plus its input copies), the figure to hold
/// against XLA's 2048^2 matmul.
fn gemm_ceiling(reps: usize) {
    const N: usize = 2048;
    let dev: Cpu = Default::default();
    let dense = dev.build_module::<Dense<N, N>, f32>();
    let x: Tensor<Rank2<N, N>, f32, Cpu> = dev.sample_normal();
    let _ = dense.forward(x.clone());
    let start = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(dense.forward(x.clone()));
    }
    let secs = start.elapsed().as_secs_f64() / reps as f64;
    println!(
        "{{\"workload\":\"GEMM2048\",\"gflop_per_s\":{:.1},\"ms\":{:.3}}}",
        2.0 * (N * N * N) as f64 / secs / 1e9,
        secs * 1e3
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--system-malloc") {
        flaxen::runtime::malloc::keep_freed_memory();
    }
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var("FLAXEN_BENCH_QUICK").is_ok_and(|v| v != "0");
    let (warmup, steps) = if quick { (2, 5) } else { (30, 300) };

    let conv1 = conv_flops(1, 32, 9, 28, 28);
    let w1 = train_flops(&[conv1, dense_flops(6272, 10)]);
    let w2 = train_flops(&[
        conv1,
        conv_flops(32, 64, 9, 14, 14),
        dense_flops(3136, 256),
        dense_flops(256, 10),
    ]);
    let args: Vec<String> = std::env::args().collect();
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1));
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        match args.get(i + 1).map(String::as_str) {
            Some("TEXT") | None => text::bench(3, 20, true),
            Some(other) => panic!("--profile takes TEXT, not {other}"),
        }
        return;
    }
    let run = |name: &str| only.is_none_or(|o| o == name);
    if run("W1") {
        bench!("W1", W1, w1, warmup, steps);
    }
    if run("W2") {
        bench!("W2", W2, w2, warmup, steps / 3);
    }
    if run("LSTM") {
        rnn::bench(warmup.min(5), (steps / 10).max(1));
    }
    if run("TEXT") {
        text::bench(warmup.min(3), (steps / 20).max(1), false);
    }
    if run("RESIZE") {
        resize_bench::bench(warmup.min(5), (steps / 10).max(1));
    }
    if run("GEMM") {
        gemm_ceiling(if quick { 1 } else { 20 });
    }
    if run("W3") {
        // A transposed conv's FLOPs are those of the conv it transposes:
        // 2 * C * O * KH * KW per input position.
        let w3 = train_flops(&[
            conv1,
            conv_flops(1, 32, 9, 14, 14),
            conv_flops(32, 64, 9, 14, 14),
            conv_flops(64, 16, 9, 14, 14),
            dense_flops(784, 10),
        ]);
        bench!("W3", W3, w3, warmup, steps / 3);
    }
}
