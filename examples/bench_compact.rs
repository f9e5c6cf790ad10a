//! Does `#[compact]` cost anything at run time? Trains the seed CNN written
//! in the DSL and the same network written by hand from the runtime layers
//! (same weights, same batches, Adam), alternating blocks of steps so both
//! see the same machine load, and prints one JSON line:
//!
//! ```text
//! {"bench":"compact_train_step","batch":32,"steps":..,"dsl_ms":..,"hand_ms":..,"ratio":..}
//! ```
//!
//! `ratio` is the DSL's median step time over the hand-written one's (1.0
//! means the DSL costs nothing at run time). A third copy of the DSL model trains on
//! `NoInputGrad(x)` (the first convolution skips the input's gradient, which
//! training never reads): `no_input_grad_ratio` is its median step time over
//! the plain DSL model's. Run with
//!
//! ```text
//! cargo run --release --example bench_compact [steps] [batch]
//! ```
//!
//! Build time. The DSL moves work from the programmer to the compiler (the
//! macro, and rustc checking each layer's where-clause), so compare the
//! build of a binary holding the DSL model with one holding the hand-written
//! tuple, dependencies already built:
//!
//! ```text
//! for kind in dsl hand; do
//!   # a one-file crate depending on flaxen by path, holding the model and a
//!   # forward + backward call (see `model_dsl` / `model_hand` below)
//!   touch src/main.rs && /usr/bin/time -f "$kind %e s" cargo build --release
//! done
//! ```

use flaxen::dfdx::losses::cross_entropy_with_logits_loss;
use flaxen::dfdx::optim::{Adam, AdamConfig, Optimizer};
use flaxen::prelude::*;
use flaxen::runtime::layers::{self, AvgPool2D, Flatten2D};
use std::time::Instant;

/// The seed CNN (Conv 32, avg_pool, Conv 64, avg_pool, Dense 256, Dense 10).
pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 28, 28>) {
        let x = Conv(features = 32, kernel_size = (3, 3))(x);
        let x = relu(x);
        let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
        let x = Conv(features = 64, kernel_size = (3, 3))(x);
        let x = relu(x);
        let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
        let x = flatten(x);
        let x = Dense(features = 256)(x);
        let x = relu(x);
        Dense(features = 10)(x)
    }
}

/// The same network by hand, from the same runtime layers the DSL lowers
/// to (flaxen's `Relu` and `Dense`).
type HandCnn = (
    (
        layers::builder::Conv2D<1, 32, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28, 28, 28>,
        layers::Relu,
        AvgPool2D<32, 2, 2, 2, 2, 0, 0, 0, 0, 28, 28, 14, 14>,
        layers::builder::Conv2D<32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14, 14, 14>,
        layers::Relu,
        AvgPool2D<64, 2, 2, 2, 2, 0, 0, 0, 0, 14, 14, 7, 7>,
    ),
    (
        Flatten2D<64, 7, 7, 3136>,
        layers::builder::Dense<3136, 256>,
        layers::Relu,
        layers::builder::Dense<256, 10>,
    ),
);

type Batch = Tensor<(usize, Const<1>, Const<28>, Const<28>), f32, Cpu>;
type Labels = Tensor<(usize, Const<10>), f32, Cpu>;

/// One training step (forward, loss, backward, Adam update), returning the
/// loss so the work cannot be optimised away.
macro_rules! train_step {
    ($model:expr, $opt:expr, $grads:expr, $x:expr, $y:expr) => {
        train_step!($model, $opt, $grads, $x, $y, ::core::convert::identity)
    };
    ($model:expr, $opt:expr, $grads:expr, $x:expr, $y:expr, $mark:expr) => {{
        let logits = $model.forward($mark($x.clone().traced($grads.take().unwrap())));
        let loss = cross_entropy_with_logits_loss(logits, $y.clone());
        let l = loss.array();
        let mut g = loss.backward();
        $opt.update(&mut $model, &g).unwrap();
        $model.zero_grads(&mut g);
        *$grads = Some(g);
        l
    }};
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let steps = args.first().copied().unwrap_or(60);
    let batch = args.get(1).copied().unwrap_or(32);
    let block = 5;

    let dev: Cpu = Default::default();
    let mut dsl = dev.build_module::<Cnn, f32>();
    let mut hand = dev.build_module::<HandCnn, f32>();
    hand.0 .0.weight = dsl.conv_0.weight.clone();
    hand.0 .0.bias = dsl.conv_0.bias.clone();
    hand.0 .3.weight = dsl.conv_1.weight.clone();
    hand.0 .3.bias = dsl.conv_1.bias.clone();
    hand.1 .1.weight = dsl.dense_0.weight.clone();
    hand.1 .1.bias = dsl.dense_0.bias.clone();
    hand.1 .3.weight = dsl.dense_1.weight.clone();
    hand.1 .3.bias = dsl.dense_1.bias.clone();
    let cfg = AdamConfig {
        lr: 1e-3,
        ..Default::default()
    };
    let mut skip = dsl.clone();
    let mut opt_dsl = Adam::new(&dsl, cfg);
    let mut opt_hand = Adam::new(&hand, cfg);
    let mut opt_skip = Adam::new(&skip, cfg);
    let mut g_dsl = Some(dsl.alloc_grads());
    let mut g_hand = Some(hand.alloc_grads());
    let mut g_skip = Some(skip.alloc_grads());

    let x: Batch = dev.sample_normal_like(&(batch, Const, Const, Const));
    let y: Labels = dev
        .sample_uniform_like(&(batch, Const))
        .softmax::<Axis<1>>();

    // Warm-up (allocator caches, thread pool), and a check that both
    // compute the same thing.
    for _ in 0..2 {
        let a = train_step!(dsl, opt_dsl, &mut g_dsl, x, y);
        let b = train_step!(hand, opt_hand, &mut g_hand, x, y);
        let c = train_step!(skip, opt_skip, &mut g_skip, x, y, NoInputGrad);
        assert_eq!(a, b, "the DSL and the hand-written model diverged");
        assert_eq!(a, c, "NoInputGrad changed the training");
    }

    let mut times: [Vec<f64>; 3] = Default::default();
    let rounds = steps.div_ceil(block).max(1);
    for r in 0..rounds {
        // Rotate which model goes first, so none always runs on a warmer
        // (or more contended) machine.
        for which in [r % 3, (r + 1) % 3, (r + 2) % 3] {
            let start = Instant::now();
            for _ in 0..block {
                match which {
                    0 => train_step!(dsl, opt_dsl, &mut g_dsl, x, y),
                    1 => train_step!(hand, opt_hand, &mut g_hand, x, y),
                    _ => train_step!(skip, opt_skip, &mut g_skip, x, y, NoInputGrad),
                };
            }
            times[which].push(start.elapsed().as_secs_f64() * 1e3 / block as f64);
        }
    }
    // The median is the headline; the minimum is less sensitive to other
    // processes on a shared machine.
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let [t_dsl, t_hand, t_skip] = times;
    let (dm, hm, sm) = (min(&t_dsl), min(&t_hand), min(&t_skip));
    let (d, h, s) = (median(t_dsl), median(t_hand), median(t_skip));
    println!(
        "{{\"bench\":\"compact_train_step\",\"batch\":{batch},\"steps\":{},\"dsl_ms\":{d:.3},\"hand_ms\":{h:.3},\"ratio\":{:.4},\"dsl_min_ms\":{dm:.3},\"hand_min_ms\":{hm:.3},\"ratio_min\":{:.4},\"dsl_no_input_grad_ms\":{s:.3},\"no_input_grad_ratio\":{:.4},\"no_input_grad_ratio_min\":{:.4}}}",
        rounds * block,
        d / h,
        dm / hm,
        s / d,
        sm / dm
    );
}
