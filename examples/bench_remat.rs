//! `remat(Block())(x)` against the plain `Block()(x)`: peak memory and step
//! time of a deep residual network's training step. Prints one JSON line:
//!
//! ```text
//! {"bench":"remat","device":"cpu","blocks":16,"width":16,"input":[3,32,32],"batch":64,"steps":..,
//!  "plain_step_peak_mib":..,"remat_step_peak_mib":..,"memory_ratio":..,
//!  "plain_peak_mib":..,"remat_peak_mib":..,
//!  "plain_step_ms":..,"remat_step_ms":..,"time_ratio":..,"losses_equal":true}
//! ```
//!
//! The network: a 3×3 conv stem to 16 channels, 16 residual blocks on
//! 16×32×32 (two 3×3 convolutions without bias, each followed by
//! BatchNorm, the first by relu, then `relu(x + y)`: the first stage of
//! the CIFAR ResNets), global average pooling and `Dense(10)`; batch 64 of
//! 3×32×32 inputs; Adam; softmax cross-entropy. The remat network is the
//! same with every block under `remat`, and starts from the plain one's
//! parameters, so the two train on the same batches to the same losses
//! (`losses_equal`; `tests/remat.rs` holds the gradients to bit-for-bit
//! equality).
//!
//! Memory is counted by a global allocator that tracks the live heap
//! bytes: `*_step_peak_mib` is the most that a training step (forward,
//! backward, update) holds above what was live before it, `*_peak_mib` the
//! highest live heap during a step, both models' parameters, Adam moments
//! and the batch included. Times are medians of the steps after a warm-up
//! round, the two modes alternating in rounds so that they share the
//! machine's load. On Cuda the allocator sees the host only, so the memory
//! figures then say nothing about the GPU.
//!
//! ```text
//! cargo run --release --example bench_remat              # full run
//! cargo run --release --example bench_remat -- --quick   # smoke run (CI): batch 2, one round
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use flaxen::prelude::*;
use flaxen::runtime::checkpoint::{load_module_state, save_module_state};
use flaxen::runtime::optim::Adam;
use flaxen::runtime::state::StateMap;

/// The global allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; the counters
// only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
        let q = System.realloc(p, l, size);
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
            grew(size);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A residual block of the first CIFAR ResNet stage.
pub struct ResBlock;

#[compact]
impl ResBlock {
    fn forward(x: Input<16, 32, 32>, features: Param<16>) {
        let y = relu(BatchNorm()(Conv(features, (3, 3), use_bias = false)(x)));
        let y = BatchNorm()(Conv(features, (3, 3), use_bias = false)(y));
        relu(x + y)
    }
}

/// 16 blocks, plain.
pub struct Plain;

#[compact]
impl Plain {
    fn forward(x: Input<3, 32, 32>) {
        let mut x = relu(BatchNorm()(Conv(16, (3, 3), use_bias = false)(x)));
        for _ in 0..16 {
            x = ResBlock()(x);
        }
        Dense(10)(mean(x, axis = (-2, -1)))
    }
}

/// 16 blocks, each recomputed in the backward pass.
pub struct Checkpointed;

#[compact]
impl Checkpointed {
    fn forward(x: Input<3, 32, 32>) {
        let mut x = relu(BatchNorm()(Conv(16, (3, 3), use_bias = false)(x)));
        for _ in 0..16 {
            x = remat(ResBlock())(x);
        }
        Dense(10)(mean(x, axis = (-2, -1)))
    }
}

type Dev = AutoDevice;
type Img = (usize, Const<3>, Const<32>, Const<32>);
type X = Tensor<Img, f32, Dev>;
type Y = Tensor<(usize,), usize, Dev>;
type Taped<S> = Tensor<S, f32, Dev, OwnedTape<f32, Dev>>;

/// A network of the benchmark: trained with `forward_mut` on a taped batch
/// without its input gradient.
trait Net:
    TensorCollection<f32, Dev>
    + ModuleMut<
        NoInputGrad<Taped<Img>>,
        Output = Taped<(usize, Const<10>)>,
        Error = <Dev as HasErr>::Err,
    >
{
}

impl<N> Net for N where
    N: TensorCollection<f32, Dev>
        + ModuleMut<
            NoInputGrad<Taped<Img>>,
            Output = Taped<(usize, Const<10>)>,
            Error = <Dev as HasErr>::Err,
        >
{
}

/// The measurements of one mode.
#[derive(Default)]
struct Mode {
    times: Vec<f64>,
    step_peak: usize,
    peak: usize,
    losses: Vec<f32>,
}

impl Mode {
    fn median_ms(&self) -> f64 {
        let mut t = self.times.clone();
        t.sort_by(f64::total_cmp);
        t.get(t.len() / 2).copied().unwrap_or(f64::NAN) * 1e3
    }
}

/// Batch `i`, the same for both modes: inputs in [-1, 1) and labels from a
/// fixed LCG.
fn batch(dev: &Dev, b: usize, i: usize) -> (X, Y) {
    let mut s = 0x2545_f491_4f6c_dd1du64 ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as u32
    };
    let x: Vec<f32> = (0..b * 3 * 32 * 32)
        .map(|_| next() as f32 / u32::MAX as f32 * 2.0 - 1.0)
        .collect();
    let y: Vec<usize> = (0..b).map(|_| next() as usize % 10).collect();
    (
        dev.tensor_from_vec(x, (b, Const, Const, Const)),
        dev.tensor_from_vec(y, (b,)),
    )
}

/// One training step of `state` on batch `i`, measured into `m` when
/// `record`.
fn step<N: Net>(
    state: &mut TrainState<N, Adam<f64>, f32, Dev>,
    dev: &Dev,
    b: usize,
    i: usize,
    m: &mut Mode,
    record: bool,
) {
    let (x, y) = batch(dev, b, i);
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let t = Instant::now();
    let (loss, grads) = state
        .value_and_grad(|model, tape| {
            let logits = model.forward_mut(NoInputGrad(x.put_tape(tape)));
            softmax_cross_entropy_with_integer_labels(logits, y).mean()
        })
        .expect("device error");
    state.apply_gradients(grads).expect("device error");
    let loss = loss.array();
    let elapsed = t.elapsed().as_secs_f64();
    let peak = PEAK.load(Ordering::Relaxed);
    m.losses.push(loss);
    if record {
        m.times.push(elapsed);
        m.step_peak = m.step_peak.max(peak - before);
        m.peak = m.peak.max(peak);
    }
}

fn main() {
    flaxen::runtime::malloc::keep_freed_memory();
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let quick = std::env::args().any(|a| a == "--quick");
    let (b, rounds, steps) = if quick { (2, 1, 1) } else { (64, 3, 3) };
    let dev = Dev::seed_from_u64(0);
    let plain = dev.build_module::<Plain, f32>();
    let mut remat = dev.build_module::<Checkpointed, f32>();
    let mut params = StateMap::new();
    save_module_state(&plain, "", &mut params);
    load_module_state(&mut remat, "", &params).expect("the two networks have the same keys");
    let mut a = TrainState::create(plain, adam(1e-3)).expect("device error");
    let mut r = TrainState::create(remat, adam(1e-3)).expect("device error");
    let (mut pm, mut rm) = (Mode::default(), Mode::default());
    // Round 0 warms up (the allocator, Adam's moments) and is not counted,
    // unless it is the only one.
    for round in 0..rounds {
        let record = round > 0 || rounds == 1;
        for s in 0..steps {
            step(&mut a, &dev, b, round * steps + s, &mut pm, record);
        }
        for s in 0..steps {
            step(&mut r, &dev, b, round * steps + s, &mut rm, record);
        }
    }
    let mib = |n: usize| n as f64 / (1024.0 * 1024.0);
    let equal = pm.losses == rm.losses;
    println!(
        "{{\"bench\":\"remat\",\"device\":\"{}\",\"blocks\":16,\"width\":16,\"input\":[3,32,32],\"batch\":{b},\"steps\":{},\
         \"plain_step_peak_mib\":{:.1},\"remat_step_peak_mib\":{:.1},\"memory_ratio\":{:.3},\
         \"plain_peak_mib\":{:.1},\"remat_peak_mib\":{:.1},\
         \"plain_step_ms\":{:.1},\"remat_step_ms\":{:.1},\"time_ratio\":{:.3},\"losses_equal\":{equal}}}",
        if cfg!(feature = "cuda") { "cuda" } else { "cpu" },
        pm.times.len(),
        mib(pm.step_peak),
        mib(rm.step_peak),
        rm.step_peak as f64 / pm.step_peak as f64,
        mib(pm.peak),
        mib(rm.peak),
        pm.median_ms(),
        rm.median_ms(),
        rm.median_ms() / pm.median_ms(),
    );
    assert!(pm.losses.iter().all(|l| l.is_finite()), "training diverged");
}
