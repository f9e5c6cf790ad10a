//! `scan!(5)` vs a naive loop, training samples/s with Adam at batch 32 on
//! 1×28×28 inputs, for the two workloads of the layer benchmark (W1, W2),
//! written with `#[compact]`. Prints one JSON line per workload:
//!
//! ```text
//! {"bench":"scan","workload":"W1","device":"cpu","k":5,"batch":32,"naive_samples_per_s":..,"scan_samples_per_s":..,"ratio":..}
//! ```
//!
//! Both train without the input batch's gradient (`NoInputGrad`), as JAX
//! differentiates with respect to the parameters only.
//!
//! - naive: every step uploads its batch, trains, and reads its loss (one
//!   device sync per step), as a plain Python loop over a jitted step does;
//! - scan: every 5 steps, one upload of 5 stacked batches, `scan!(5, ..)`,
//!   and one read of the 5 losses.
//!
//! The two modes alternate every 5 steps (each going first in every other
//! round) so they share the machine's load; the ratio (scan / naive) is
//! the figure to compare across machines.
//!
//! ```text
//! cargo run --release --example bench_scan             # full run
//! cargo run --release --example bench_scan -- --quick  # smoke run (CI)
//! cargo run --release --example bench_scan -- --profile W2   # where W2's step goes
//! cargo run --release --features cuda --example bench_scan   # on a GPU
//! ```
//!
//! `--profile W1|W2` runs no benchmark: it trains the workload for 10
//! warm-up steps, then profiles 50 (`flaxen::runtime::profile`) and prints
//! the per-layer table.

use std::time::Instant;

use flaxen::dfdx::shapes::Rank5;
use flaxen::prelude::*;
use flaxen::runtime::optim::Adam;

/// Conv 32 3×3 SAME → relu → avg_pool 2/2 → flatten → Dense 10.
pub struct W1;

#[compact]
impl W1 {
    fn forward(x: Input<1, 28, 28>) {
        let x = relu(Conv(32, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        Dense(10)(flatten(x))
    }
}

/// The seed CNN.
pub struct W2;

#[compact]
impl W2 {
    fn forward(x: Input<1, 28, 28>) {
        let x = relu(Conv(32, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = relu(Conv(64, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = relu(Dense(256)(flatten(x)));
        Dense(10)(x)
    }
}

const K: usize = 5;
const B: usize = 32;
const PIXELS: usize = 28 * 28;
type Dev = AutoDevice;
type X = Tensor<Rank4<B, 1, 28, 28>, f32, Dev>;
type Y = Tensor<Rank1<B>, usize, Dev>;

/// Host-side data: `n` batches of random images and labels.
struct HostData {
    x: Vec<f32>,
    y: Vec<usize>,
}

impl HostData {
    fn new(n: usize) -> Self {
        // A fixed LCG: the figures must not depend on a data generator.
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let x = (0..n * B * PIXELS)
            .map(|_| next() as f32 / u32::MAX as f32 * 2.0 - 1.0)
            .collect();
        let y = (0..n * B).map(|_| next() as usize % 10).collect();
        Self { x, y }
    }
}

/// A workload's module: trainable, and run on a taped batch without its
/// input gradient.
trait Net:
    TensorCollection<f32, Dev>
    + Module<
        NoInputGrad<Tensor<Rank4<B, 1, 28, 28>, f32, Dev, OwnedTape<f32, Dev>>>,
        Output = Tensor<Rank2<B, 10>, f32, Dev, OwnedTape<f32, Dev>>,
        Error = <Dev as HasErr>::Err,
    >
{
}

impl<N> Net for N where
    N: TensorCollection<f32, Dev>
        + Module<
            NoInputGrad<Tensor<Rank4<B, 1, 28, 28>, f32, Dev, OwnedTape<f32, Dev>>>,
            Output = Tensor<Rank2<B, 10>, f32, Dev, OwnedTape<f32, Dev>>,
            Error = <Dev as HasErr>::Err,
        >
{
}

fn bench<M>(name: &str, dev: &Dev, blocks: usize, scans_per_block: usize)
where
    M: BuildOnDevice<Dev, f32>,
    M::Built: Net,
{
    type State<N> = TrainState<N, Adam<f64>, f32, Dev>;
    fn step<N>(mut s: State<N>, (x, y): (X, Y)) -> (State<N>, Loss<f32, Dev>)
    where
        N: Net,
    {
        let (loss, grads) = s
            .value_and_grad(|m, tape| {
                let logits = m.forward(NoInputGrad(x.put_tape(tape)));
                softmax_cross_entropy_with_integer_labels(logits, y).mean()
            })
            .expect("device error");
        s.apply_gradients(grads).expect("device error");
        (s, loss)
    }

    let data = HostData::new(K);
    let mut state: State<M::Built> =
        TrainState::create(dev.build_module::<M, f32>(), adam(1e-3)).expect("device error");
    let mut naive_s = 0.0;
    let mut scan_s = 0.0;
    let mut sink = 0.0f32;
    // The two modes alternate every K steps, each going first in every
    // other round, so that both see the same machine load and neither
    // always follows the other. Block 0 is warm-up (allocator, caches) and
    // is not counted.
    for block in 0..=blocks {
        for round in 0..scans_per_block {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for scanned in order {
                let t = Instant::now();
                state = if scanned {
                    let xs: Tensor<Rank5<K, B, 1, 28, 28>, f32, Dev> =
                        dev.tensor_from_vec(data.x.clone(), Default::default());
                    let ys: Tensor<Rank2<K, B>, usize, Dev> =
                        dev.tensor_from_vec(data.y.clone(), Default::default());
                    let (s, losses) = scan!(K, step, state, (xs, ys));
                    sink += losses.array().iter().sum::<f32>();
                    s
                } else {
                    for k in 0..K {
                        let x: X = dev.tensor_from_vec(
                            data.x[k * B * PIXELS..(k + 1) * B * PIXELS].to_vec(),
                            (Const, Const, Const, Const),
                        );
                        let y: Y =
                            dev.tensor_from_vec(data.y[k * B..(k + 1) * B].to_vec(), (Const,));
                        let (s, loss) = step(state, (x, y));
                        state = s;
                        sink += loss.array();
                    }
                    state
                };
                let dt = t.elapsed().as_secs_f64();
                if block > 0 {
                    *(if scanned { &mut scan_s } else { &mut naive_s }) += dt;
                }
            }
        }
    }
    let samples = (blocks * scans_per_block * K * B) as f64;
    let (naive, scan) = (samples / naive_s, samples / scan_s);
    println!(
        "{{\"bench\":\"scan\",\"workload\":\"{name}\",\"device\":\"{}\",\"k\":{K},\"batch\":{B},\"naive_samples_per_s\":{naive:.0},\"scan_samples_per_s\":{scan:.0},\"ratio\":{:.3}}}",
        if cfg!(feature = "cuda") { "cuda" } else { "cpu" },
        scan / naive
    );
    assert!(sink.is_finite(), "training diverged");
}

/// Trains `M` for 10 steps, then profiles 50 and prints the table.
fn profile<M>(dev: &Dev)
where
    M: BuildOnDevice<Dev, f32>,
    M::Built: Net,
{
    let data = HostData::new(K);
    let mut state: TrainState<M::Built, Adam<f64>, f32, Dev> =
        TrainState::create(dev.build_module::<M, f32>(), adam(1e-3)).expect("device error");
    let run = |steps: usize, state: &mut TrainState<M::Built, Adam<f64>, f32, Dev>| {
        for i in 0..steps {
            let _step = flaxen::runtime::profile::step_scope();
            let k = i % K;
            let x: X = dev.tensor_from_vec(
                data.x[k * B * PIXELS..(k + 1) * B * PIXELS].to_vec(),
                (Const, Const, Const, Const),
            );
            let y: Y = dev.tensor_from_vec(data.y[k * B..(k + 1) * B].to_vec(), (Const,));
            let (loss, grads) = state
                .value_and_grad(|m, tape| {
                    let logits = m.forward(NoInputGrad(x.put_tape(tape)));
                    softmax_cross_entropy_with_integer_labels(logits, y).mean()
                })
                .expect("device error");
            state.apply_gradients(grads).expect("device error");
            assert!(loss.array().is_finite(), "training diverged");
        }
    };
    run(10, &mut state);
    let report = flaxen::runtime::profile::profile(|| run(50, &mut state));
    println!("{}", report.table());
}

fn main() {
    // dfdx allocates every activation afresh; keep freed blocks in the
    // process instead of page-faulting them in again each step.
    flaxen::runtime::malloc::keep_freed_memory();
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let dev = Dev::seed_from_u64(0);
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        match args.get(i + 1).map(String::as_str) {
            Some("W1") => profile::<W1>(&dev),
            Some("W2") | None => profile::<W2>(&dev),
            Some(other) => panic!("--profile takes W1 or W2, not {other}"),
        }
        return;
    }
    let (blocks, w1_scans, w2_scans) = if quick { (1, 2, 1) } else { (6, 20, 4) };
    bench::<W1>("W1", &dev, blocks, w1_scans);
    bench::<W2>("W2", &dev, blocks, w2_scans);
}
