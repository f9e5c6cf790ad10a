//! The README's main job: train the seed CNN, written with `#[compact]`, on
//! the embedded 8×8 handwritten digits (or on MNIST with `--data-dir`).
//!
//! ```text
//! cargo run --release --example train                 # embedded digits
//! cargo run --release --example train -- --data-dir ~/mnist --epochs 3
//! cargo run --release --example train -- --resume     # continue the last run
//! cargo run --release --example train -- --profile 20 --out runs/profile
//! ```
//!
//! Every run writes to `--out` (default `runs/train`): `metrics.jsonl`
//! (the loss and learning rate every `--log-every` steps, the train and
//! test figures every epoch), TensorBoard event files and `checkpoints/ckpt-<step>.safetensors` (the
//! last three are kept). `--resume` restores the newest checkpoint — model,
//! optimizer, step and data order — and continues bit for bit. A directory
//! that already holds a run is refused unless `--resume` continues it or
//! `--overwrite` replaces it, so no run's files are mixed with another's;
//! a directory a live run holds (its lock, `<out>/.lock`) is refused
//! whatever the flags. The data are checked (image size, labels, enough
//! examples) before the run directory is touched.
//!
//! `--profile N` trains a few warmup steps, then N steps under flaxen's
//! profiler, prints where their time went layer by layer (forward and
//! backward) and writes `<out>/profile.trace.json`, a Chrome trace for
//! Perfetto or `chrome://tracing`; the run stops there, as with
//! `--max-steps`.
//!
//! Built with `--features mpi`, the same program trains data-parallel under
//! `mpirun -np N` (N = 1, 2 or 4): every rank takes its 32 / N examples of
//! each global batch of 32, gradients are averaged across the ranks before
//! the optimizer, and rank 0 writes the checkpoints, logs and progress, so
//! the run trains the same model as one process does:
//!
//! ```text
//! cargo build --release --features mpi --example train
//! RAYON_NUM_THREADS=1 mpirun -np 2 target/release/examples/train --epochs 3
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use flaxen::dist::{DataParallel, Fnv64};
use flaxen::prelude::*;
use flaxen::runtime::data::idx::{find_mnist_files, load_mnist, MNIST_CLASSES};
use flaxen::runtime::data::Requirements;
use flaxen::runtime::logging::JsonlWriter;
use flaxen::runtime::optim::{Adam, Chain, ClipByGlobalNorm};
use flaxen::runtime::profile::{self, ProfileReport, Profiler};
use flaxen::runtime::run_lock::RunLock;
use flaxen::runtime::schedule::WarmupCosineDecay;

/// The seed CNN adapted to the 8×8 digits: the same layers as the 28×28
/// original, so after two 2×2 poolings the map is 64×2×2 (256 features)
/// instead of 64×7×7.
pub struct DigitsCnn;

#[compact]
impl DigitsCnn {
    fn forward(x: Input<1, 8, 8>) {
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

/// The seed CNN as the original Flax example writes it, for 28×28 MNIST
/// (`--data-dir`).
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

/// The process group: every rank of `mpirun` with the `mpi` feature, the
/// process alone without it.
#[cfg(feature = "mpi")]
type Group = flaxen::dist::Mpi;
#[cfg(not(feature = "mpi"))]
type Group = flaxen::dist::Local;
type Dp = DataParallel<Group>;

#[cfg(feature = "mpi")]
fn group() -> Result<Group> {
    Ok(flaxen::dist::Mpi::init()?)
}
#[cfg(not(feature = "mpi"))]
fn group() -> Result<Group> {
    Ok(flaxen::dist::Local)
}

/// Train the seed CNN with flaxen.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Directory with MNIST IDX files (train-images-idx3-ubyte[.gz], ...);
    /// without it the embedded 8×8 digits are used.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Passes over the training set (at least 1).
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..))]
    epochs: u64,
    /// Training steps per `scan!` call (K stacked batches): 1, 5 or 10.
    #[arg(long, default_value_t = 5, value_parser = parse_steps_per_scan)]
    steps_per_scan: usize,
    /// Seed of the initial weights and of the data order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Peak learning rate of the warmup-cosine schedule (finite, > 0).
    #[arg(long, default_value_t = 3e-3, value_parser = parse_lr)]
    lr: f64,
    /// Run directory: metrics, TensorBoard events, checkpoints.
    #[arg(long, default_value = "runs/train")]
    out: PathBuf,
    /// Continue from the newest checkpoint in `<out>/checkpoints`.
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Start afresh in a run directory that holds an earlier run, deleting
    /// that run's checkpoints, metrics.jsonl and TensorBoard events (without
    /// this or `--resume`, such a directory is refused).
    #[arg(long)]
    overwrite: bool,
    /// Stop after this many steps in this invocation (at least 1; the
    /// schedule still spans `--epochs`); with `--resume` this splits one run
    /// in parts.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_steps: Option<u64>,
    /// Hide the progress bar (log lines only).
    #[arg(long)]
    quiet: bool,
    /// Profile N training steps (rounded up to whole `scan!` calls) after
    /// 10 warmup steps: print a table of where their time goes, layer by
    /// layer, and write `profile.trace.json` (Perfetto, chrome://tracing)
    /// into the run directory. The run stops after them, as with
    /// `--max-steps`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    profile: Option<u64>,
    /// Log the training loss (the mean over each `scan!` call's steps) and
    /// the learning rate the schedule gave every N steps (at the first
    /// `scan!` call that reaches each multiple of N), as the `train_steps`
    /// split of `metrics.jsonl` and TensorBoard; the per-epoch `train` and
    /// `test` lines stay as they are.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    log_every: u64,
}

/// Training steps before `--profile`'s, so that first-call costs (memory
/// growth, caches) stay out of the profile.
const PROFILE_WARMUP: u64 = 10;

/// A learning rate: a finite number above 0 (`nan`, `inf`, 0 and negative
/// rates would train nothing or diverge at once).
fn parse_lr(s: &str) -> Result<f64, String> {
    let lr: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if lr.is_finite() && lr > 0.0 {
        Ok(lr)
    } else {
        Err(format!(
            "{lr} is not a learning rate: it must be finite and above 0"
        ))
    }
}

/// `scan!` unrolls K at compile time: only the compiled K are accepted.
fn parse_steps_per_scan(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(k @ (1 | 5 | 10)) => Ok(k),
        _ => Err(format!("{s}: must be 1, 5 or 10")),
    }
}

const BATCH: usize = 32;
/// Classes of the digits and of MNIST.
const CLASSES: usize = 10;
type Dev = AutoDevice;
type Tx = Chain<(ClipByGlobalNorm, Adam<WarmupCosineDecay>)>;

/// A data set and the files it came from (to name them in errors).
struct Split {
    data: ArrayDataset,
    images: PathBuf,
    labels: PathBuf,
}

fn main() -> Result<()> {
    // dfdx allocates every activation afresh; keep freed blocks in the
    // process instead of page-faulting them in again each step.
    flaxen::runtime::malloc::keep_freed_memory();
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let args = Args::parse();
    let mut dp = DataParallel::new(group()?);
    let result = load_and_run(&args, &mut dp);
    if let (Err(e), true) = (&result, dp.size() > 1) {
        // The other ranks would wait for this one in their next all-reduce.
        dp.abort(&format!("{e:#}"));
    }
    result
}

fn load_and_run(args: &Args, dp: &mut Dp) -> Result<()> {
    match &args.data_dir {
        None => {
            let (train, test) = flaxen::runtime::data::digits::load()?;
            let embedded = |data, which: &str| Split {
                data,
                images: PathBuf::from(format!("<embedded digits, {which} images>")),
                labels: PathBuf::from(format!("<embedded digits, {which} labels>")),
            };
            dispatch::<DigitsCnn, 8, 8>(args, embedded(train, "train"), embedded(test, "test"), dp)
        }
        Some(dir) => {
            let files = find_mnist_files(dir)?;
            debug_assert_eq!(MNIST_CLASSES, CLASSES);
            let load = |images: PathBuf, labels: PathBuf| -> Result<Split> {
                let data = load_mnist(&images, &labels)?;
                Ok(Split {
                    data,
                    images,
                    labels,
                })
            };
            let train = load(files.train_images, files.train_labels)?;
            let test = load(files.test_images, files.test_labels)?;
            dispatch::<Cnn, 28, 28>(args, train, test, dp)
        }
    }
}

fn dispatch<M, const H: usize, const W: usize>(
    args: &Args,
    train: Split,
    test: Split,
    dp: &mut Dp,
) -> Result<()>
where
    M: Model<H, W>,
    M::Net: Batches<H, W>,
{
    // Before anything is created: a wrong image size or a short set would
    // otherwise fail without naming the file (the test set only after a
    // whole epoch, leaving a run directory behind), and a label past the
    // last class would panic inside the loss.
    let shape = vec![1, H, W];
    Requirements::new(shape.clone(), CLASSES)
        .min_len(BATCH)
        .check(&train.data, &train.images, &train.labels)
        .context("the training set cannot be used")?;
    Requirements::new(shape, CLASSES)
        .check(&test.data, &test.images, &test.labels)
        .context("the test set cannot be used")?;
    let (train, test) = (train.data, test.data);
    // Each rank's batch is a const generic: the global batch of 32 splits
    // evenly on 1, 2 or 4 ranks.
    match dp.size() {
        1 => by_scan::<M, H, W, BATCH>(args, train, test, dp),
        #[cfg(feature = "mpi")]
        2 => by_scan::<M, H, W, { BATCH / 2 }>(args, train, test, dp),
        #[cfg(feature = "mpi")]
        4 => by_scan::<M, H, W, { BATCH / 4 }>(args, train, test, dp),
        n => bail!("the global batch of {BATCH} is split between 1, 2 or 4 ranks, not {n}"),
    }
}

fn by_scan<M, const H: usize, const W: usize, const LB: usize>(
    args: &Args,
    train: ArrayDataset,
    test: ArrayDataset,
    dp: &mut Dp,
) -> Result<()>
where
    M: Model<H, W>,
    M::Net: Net<H, W, LB>,
{
    match args.steps_per_scan {
        1 => run::<M, H, W, 1, LB>(args, train, test, dp),
        5 => run::<M, H, W, 5, LB>(args, train, test, dp),
        10 => run::<M, H, W, 10, LB>(args, train, test, dp),
        k => {
            bail!("--steps-per-scan must be 1, 5 or 10 (scan! unrolls K at compile time), got {k}")
        }
    }
}

/// What `run` needs of a model on `1×H×W` inputs with 10 classes.
trait Model<const H: usize, const W: usize>: BuildOnDevice<Dev, f32, Built = Self::Net> {
    type Net;
}

impl<const H: usize, const W: usize, M: BuildOnDevice<Dev, f32>> Model<H, W> for M {
    type Net = M::Built;
}

/// What `run` needs of a built model: training in batches of `B`,
/// evaluation in batches of any size.
trait Net<const H: usize, const W: usize, const B: usize>:
    TensorCollection<f32, Dev>
    + Module<
        NoInputGrad<Tensor<Rank4<B, 1, H, W>, f32, Dev, OwnedTape<f32, Dev>>>,
        Output = Tensor<Rank2<B, 10>, f32, Dev, OwnedTape<f32, Dev>>,
        Error = <Dev as HasErr>::Err,
    > + Module<
        Tensor<(usize, Const<1>, Const<H>, Const<W>), f32, Dev>,
        Output = Tensor<(usize, Const<10>), f32, Dev>,
        Error = <Dev as HasErr>::Err,
    >
{
}

impl<const H: usize, const W: usize, const B: usize, N> Net<H, W, B> for N where
    N: TensorCollection<f32, Dev>
        + Module<
            NoInputGrad<Tensor<Rank4<B, 1, H, W>, f32, Dev, OwnedTape<f32, Dev>>>,
            Output = Tensor<Rank2<B, 10>, f32, Dev, OwnedTape<f32, Dev>>,
            Error = <Dev as HasErr>::Err,
        > + Module<
            Tensor<(usize, Const<1>, Const<H>, Const<W>), f32, Dev>,
            Output = Tensor<(usize, Const<10>), f32, Dev>,
            Error = <Dev as HasErr>::Err,
        >
{
}

/// A built model for every per-rank batch this build can run: the global
/// batch, and with `mpi` its halves and quarters.
#[cfg(feature = "mpi")]
trait Batches<const H: usize, const W: usize>:
    Net<H, W, BATCH> + Net<H, W, { BATCH / 2 }> + Net<H, W, { BATCH / 4 }>
{
}
#[cfg(feature = "mpi")]
impl<const H: usize, const W: usize, N> Batches<H, W> for N where
    N: Net<H, W, BATCH> + Net<H, W, { BATCH / 2 }> + Net<H, W, { BATCH / 4 }>
{
}
#[cfg(not(feature = "mpi"))]
trait Batches<const H: usize, const W: usize>: Net<H, W, BATCH> {}
#[cfg(not(feature = "mpi"))]
impl<const H: usize, const W: usize, N: Net<H, W, BATCH>> Batches<H, W> for N {}

type State<M> = TrainState<M, Tx, f32, Dev>;
type Batch<const H: usize, const W: usize, const B: usize> = (
    Tensor<Rank4<B, 1, H, W>, f32, Dev>,
    Tensor<Rank1<B>, usize, Dev>,
);

/// A fingerprint of what every rank must agree on besides the model.
fn options_fingerprint(args: &Args) -> u64 {
    let mut h = Fnv64::new();
    h.write_str(&format!(
        "{:?} {} {} {} {:?} {:?} {} {}",
        args.data_dir,
        args.epochs,
        args.steps_per_scan,
        args.seed,
        args.lr.to_bits(),
        args.max_steps,
        args.resume,
        args.overwrite
    ));
    h.finish()
}

fn run<M, const H: usize, const W: usize, const K: usize, const LB: usize>(
    args: &Args,
    train: ArrayDataset,
    test: ArrayDataset,
    dp: &mut Dp,
) -> Result<()>
where
    M: Model<H, W>,
    M::Net: Net<H, W, LB>,
{
    let dev = Dev::seed_from_u64(args.seed);
    let root = dp.is_root();
    let mut loader: Loader<Rank3<1, H, W>, LB, f32, Dev> = Loader::new(
        train,
        &dev,
        LoaderConfig::new(args.seed).shard(dp.rank(), dp.size()),
    )?;
    let steps_per_epoch = loader.batches_per_epoch() as u64;
    let total_steps = args.epochs * steps_per_epoch;
    // Optax-style: clip, then AdamW whose learning rate warms up over the
    // first epoch and decays along a cosine to 1% of the peak.
    let schedule = warmup_cosine_decay(
        0.0,
        args.lr,
        steps_per_epoch,
        total_steps.max(steps_per_epoch + 1),
        args.lr * 0.01,
    );
    let tx = chain((clip_by_global_norm(1.0), adamw(schedule, 1e-4)));
    let mut state: State<M::Net> = TrainState::try_create(dev.build_module::<M, f32>(), tx)?;
    // Same model, seed and options on every rank, or every rank stops here.
    dp.check_agree(
        &state.params,
        &[
            ("the global batch", BATCH as u64),
            ("the command line", options_fingerprint(args)),
        ],
    )?;

    // Rank 0 owns the run directory. Held until `run` returns (the kernel
    // releases it if the process dies): a second run, `--resume` or
    // `--overwrite` on a live run is refused before it touches anything.
    let _lock = if root {
        Some(RunLock::acquire(&args.out)?)
    } else {
        None
    };
    let ckpts = CheckpointManager::new(args.out.join("checkpoints"), 3)?;
    if root {
        // A kill during a checkpoint write leaves its temporary file; with
        // the lock held no write is in progress, so any such file is stale.
        for stale in ckpts.remove_temp_files()? {
            println!("removed {}, left by an interrupted write", stale.display());
        }
        if !args.resume {
            claim_run_dir(&args.out, &ckpts, args.overwrite)?;
        }
    }
    // The other ranks read the directory only once rank 0 holds it.
    dp.barrier();
    if args.resume {
        match ckpts.restore_latest()? {
            Some(ckpt) => {
                ckpt.restore()
                    .part("train", &mut state)
                    .part("data", &mut loader)
                    .apply()?;
                if state.step() != ckpt.step() {
                    bail!(
                        "{}: the file's step is {} but its training state's is {}: the file is inconsistent",
                        ckpt.path().display(),
                        ckpt.step(),
                        state.step()
                    );
                }
                if root {
                    println!(
                        "resumed from {} at step {}",
                        ckpt.path().display(),
                        state.step()
                    );
                }
            }
            None if root => {
                println!("no checkpoint in {}: starting fresh", ckpts.dir().display())
            }
            None => {}
        }
        // Lines logged after the checkpoint (by the run that crashed) would
        // be logged again by this one.
        let metrics = args.out.join("metrics.jsonl");
        let dropped = if root {
            JsonlWriter::truncate_after(&metrics, state.step())?
        } else {
            0
        };
        if dropped > 0 {
            println!(
                "dropped {dropped} lines after step {} from {}",
                state.step(),
                metrics.display()
            );
        }
    }
    let first_step = state.step();
    let mut stop_at = args
        .max_steps
        .map_or(total_steps, |n| total_steps.min(first_step + n));
    // `--profile`: whole scan! calls of warmup, then of profiled steps.
    let profile_from = match args.profile {
        None => None,
        Some(n) => {
            let k = K as u64;
            let from = first_step + PROFILE_WARMUP.div_ceil(k) * k;
            if from >= stop_at {
                bail!(
                    "--profile: the run ends at step {stop_at}, before {} warmup steps are done",
                    from - first_step
                );
            }
            stop_at = stop_at.min(from + n.div_ceil(k) * k);
            Some(from)
        }
    };
    let mut logger = if root {
        Some(MetricsLogger::new(&args.out)?)
    } else {
        None
    };
    if root && dp.size() > 1 {
        println!(
            "data parallel: {} ranks, {LB} examples each of every batch of {BATCH}",
            dp.size()
        );
    }
    let mut progress = if args.quiet || !root {
        Progress::hidden(total_steps, BATCH as u64)
    } else {
        Progress::new(total_steps, BATCH as u64)
    };

    let mut metrics: Metrics<f32, Dev> = Metrics::new();
    let started = Instant::now();
    let mut profiler: Option<Profiler> = None;
    let mut profiled: Option<(u64, ProfileReport)> = None;
    while state.step() < stop_at {
        if profile_from == Some(state.step()) {
            profiler = Some(Profiler::start());
        }
        let (xs, ys) = loader.next_stacked::<K>()?;
        let (next, losses) = scan!(
            K,
            |s, b| train_step::<M::Net, H, W, LB>(s, b, &mut metrics, dp),
            state,
            (xs, ys)
        );
        state = next;
        // One read of the device per K steps; every rank sees the same
        // mean, so all of them stop together on a non-finite one.
        let loss = dp.mean(losses.mean().array() as f64) as f32;
        if !loss.is_finite() {
            check_finite(&state.params, None, state.step())?;
            bail!("the loss is {loss} at step {}", state.step());
        }
        let acc = metrics.accuracy().unwrap_or(0.0) as f32;
        progress.update(state.step().min(total_steps), loss, acc);
        if state.step() / args.log_every > (state.step() - K as u64) / args.log_every {
            if let Some(logger) = logger.as_mut() {
                // The rate of this call's last update (Optax's
                // `inject_hyperparams` reading).
                let lr = state.learning_rate().unwrap_or(f64::NAN);
                let scalars = [("loss", f64::from(loss)), ("learning_rate", lr)];
                logger.log(state.step(), "train_steps", &scalars)?;
            }
        }
        if state.step() >= stop_at {
            // Rank 0's profile stands for all: the replicas run the same steps.
            if let (Some(p), Some(from), true) = (profiler.take(), profile_from, root) {
                let report = p.finish();
                let path = args.out.join("profile.trace.json");
                report
                    .write_chrome_trace(&path)
                    .with_context(|| format!("writing {}", path.display()))?;
                profiled = Some((from, report));
            }
        }
        // Evaluation and checkpoints are not training steps: out of the
        // profile.
        if let Some(p) = profiler.as_mut() {
            p.pause();
        }

        let epoch_done =
            state.step() / steps_per_epoch > (state.step() - K as u64) / steps_per_epoch;
        if epoch_done || state.step() >= stop_at {
            let epoch = state.step() / steps_per_epoch;
            let train_loss = dp.mean(metrics.mean_loss().unwrap_or(f64::NAN));
            let train_acc = dp.mean(metrics.accuracy().unwrap_or(f64::NAN));
            metrics.reset();
            // The replicas are equal: every rank scores the same.
            let test_acc = evaluate(&state.params, &test, &dev)?;
            if let Some(logger) = logger.as_mut() {
                logger.log(
                    state.step(),
                    "train",
                    &[("loss", train_loss), ("accuracy", train_acc)],
                )?;
                logger.log(state.step(), "test", &[("accuracy", test_acc)])?;
                progress.println(format!(
                    "epoch {epoch:>3}  step {:>6}  train loss {train_loss:.4}  train acc {:.2}%  test acc {:.2}%",
                    state.step(),
                    100.0 * train_acc,
                    100.0 * test_acc
                ));
            }
            // The loss is finite (checked above), but the last update may
            // still have made a parameter NaN/Inf: never checkpoint that
            // (`save` refuses it too, before rotating anything out).
            check_finite(&state.params, None, state.step())?;
            if root {
                let mut ckpt = Checkpoint::new(state.step());
                ckpt.add("train", &state)?.add("data", &loader)?;
                ckpts.save(&ckpt)?;
            }
        }
        if let Some(p) = profiler.as_mut() {
            p.resume();
        }
    }
    progress.finish();
    if let Some(logger) = logger.as_mut() {
        logger.flush()?;
    }
    let secs = started.elapsed().as_secs_f64();
    let test_acc = evaluate(&state.params, &test, &dev)?;
    if !root {
        return Ok(());
    }
    println!(
        "done: {} steps in {secs:.1} s ({:.0} samples/s), test accuracy {:.2}%; run directory {}",
        state.step(),
        ((state.step() - first_step) as f64 * BATCH as f64) / secs.max(1e-9),
        100.0 * test_acc,
        args.out.display()
    );
    if let Some((from, report)) = profiled {
        println!(
            "\nprofile of steps {from}..{} ({} steps after {} warmup steps, model {}):\n\n{}",
            state.step(),
            report.steps(),
            from - first_step,
            std::any::type_name::<M>()
                .rsplit("::")
                .next()
                .unwrap_or("?"),
            report.table()
        );
        println!(
            "Chrome trace: {} (open it in https://ui.perfetto.dev or chrome://tracing)",
            args.out.join("profile.trace.json").display()
        );
    }
    Ok(())
}

/// One optimizer step: the seed's `train_step`. The loss stays on the
/// device; loss and accuracy are summed on the device for the progress bar.
fn train_step<N, const H: usize, const W: usize, const B: usize>(
    mut state: State<N>,
    (x, y): Batch<H, W, B>,
    metrics: &mut Metrics<f32, Dev>,
    dp: &mut Dp,
) -> (State<N>, Loss<f32, Dev>)
where
    N: Net<H, W, B>,
{
    // One span per step in `--profile`'s trace (nothing otherwise).
    let _step = profile::step_scope();
    let mut logits_seen = None;
    let (loss, mut grads) = state
        .value_and_grad(|model, tape| {
            // The input batch needs no gradient: the first conv skips it.
            let logits = model.forward(NoInputGrad(x.put_tape(tape)));
            logits_seen = Some(logits.retaped::<NoneTape>());
            softmax_cross_entropy_with_integer_labels(logits, y.clone()).mean()
        })
        .expect("device error in the forward/backward pass");
    // `lax.pmean` of the gradients: one all-reduce, nothing with one rank.
    dp.all_reduce_mean(&state.params, &mut grads)
        .expect("all-reduce of the gradients");
    state
        .apply_gradients(grads)
        .expect("device error in the optimizer update");
    if let Some(logits) = logits_seen {
        metrics.add_accuracy(&logits, &y);
    }
    metrics.add_loss(&loss);
    (state, loss)
}

/// Accuracy over the whole test set, in batches of 256 examples.
fn evaluate<N, const H: usize, const W: usize>(
    model: &N,
    test: &ArrayDataset,
    dev: &Dev,
) -> Result<f64>
where
    N: Module<
        Tensor<(usize, Const<1>, Const<H>, Const<W>), f32, Dev>,
        Output = Tensor<(usize, Const<10>), f32, Dev>,
        Error = <Dev as HasErr>::Err,
    >,
{
    let cfg = LoaderConfig::new(0).shuffle(false).drop_last(false);
    let mut loader: Loader<Rank3<1, H, W>, 256, f32, Dev> = Loader::new(test.clone(), dev, cfg)?;
    let mut metrics: Metrics<f32, Dev> = Metrics::new();
    for _ in 0..loader.batches_per_epoch() {
        let (x, y) = loader.next_batch_dyn()?;
        let logits = model
            .try_forward(x)
            .map_err(|e| anyhow::anyhow!("device error: {e:?}"))?;
        metrics.add_accuracy(&logits, &y);
    }
    Ok(metrics.accuracy().unwrap_or(0.0))
}

/// Makes `out` ready for a fresh run. A directory with an earlier run's
/// files (checkpoints, `metrics.jsonl`, TensorBoard events) is refused
/// unless `overwrite` is set: a fresh run there would append to its
/// metrics, have its own early checkpoints rotated away by the earlier
/// run's later ones, and leave `--resume` to pick up the earlier run. With
/// `overwrite`, those files (only the ones this program writes) are deleted
/// first.
fn claim_run_dir(out: &Path, ckpts: &CheckpointManager, overwrite: bool) -> Result<()> {
    let checkpoints = ckpts.list()?;
    let newest = checkpoints.last().map(|(step, _)| *step);
    let mut earlier: Vec<PathBuf> = checkpoints.into_iter().map(|(_, p)| p).collect();
    for entry in std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "metrics.jsonl" || name.starts_with("events.out.tfevents.") {
            earlier.push(path);
        }
    }
    if earlier.is_empty() {
        return Ok(());
    }
    if !overwrite {
        let what = match newest {
            Some(step) => format!("a run (newest checkpoint: step {step})"),
            None => "an earlier run's metrics".to_string(),
        };
        bail!(
            "{} already holds {what}; pass --resume to continue it, --overwrite to \
             replace it, or --out to start elsewhere",
            out.display()
        );
    }
    for path in &earlier {
        std::fs::remove_file(path).with_context(|| format!("deleting {}", path.display()))?;
    }
    println!(
        "--overwrite: deleted {} files of the earlier run in {}",
        earlier.len(),
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("train").chain(args.iter().copied()))
    }

    #[test]
    fn the_cli_refuses_what_cannot_train() {
        for bad in [
            &["--epochs", "0"][..],
            &["--max-steps", "0"],
            &["--lr=-0.001"],
            &["--lr", "0"],
            &["--lr", "nan"],
            &["--lr", "inf"],
            &["--steps-per-scan", "3"],
            &["--profile", "0"],
        ] {
            let err = parse(bad).expect_err(&format!("{bad:?} was accepted"));
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{bad:?}"
            );
        }
        let ok = parse(&["--epochs", "1", "--lr", "1e-3", "--steps-per-scan", "10"]).unwrap();
        assert_eq!((ok.epochs, ok.lr, ok.steps_per_scan), (1, 1e-3, 10));
        assert_eq!(ok.profile, None);
        assert_eq!(parse(&["--profile", "20"]).unwrap().profile, Some(20));
        let msg = parse(&["--lr", "nan"]).unwrap_err().to_string();
        assert!(msg.contains("must be finite and above 0"), "{msg}");
    }
}
