//! Data-parallel training over MPI (`--features mpi`; needs OpenMPI's
//! `mpirun` on the PATH).
//!
//! Each test starts `mpirun -np 2` on this very test binary, running one of
//! the `rank_*` tests (ignored in a plain run) in two processes that write
//! what they trained into a scratch directory; the test then compares it
//! with a single process (the group of one, [`Local`]) training on the
//! global batch. Tolerances: after the same steps, 2 ranks with local batch
//! B against 1 process with batch 2B differ only by the order of the
//! gradient sums: f64 within 1e-12, f32 within 1e-5 (relative to the
//! largest parameter); the ranks' own parameters are equal bit for bit.
#![cfg(feature = "mpi")]

#[path = "common/fixture.rs"]
mod fixture;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flaxen::dist::{Communicator, DataParallel, DistError, Local, Mpi, ReduceDtype};
use flaxen::prelude::*;
use flaxen::runtime::checkpoint::Element;
use flaxen::runtime::data::digits;
use flaxen::runtime::dist::HostGradients;
use flaxen::runtime::optim::Params;

/// A small CNN on the digits: convolution, pooling, two dense layers.
pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 8, 8>) {
        let x = relu(Conv(6, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = relu(Dense(16)(flatten(x)));
        Dense(10)(x)
    }
}

/// Local batch of every rank in the 2-rank runs.
const B: usize = 8;
/// Training steps of a run.
const STEPS: usize = 6;
const SEED: u64 = 5;
/// Where a child run writes; set by the parent test.
const OUT_VAR: &str = "FLAXEN_DIST_OUT";

type Tx = flaxen::runtime::optim::Adam<f64>;

/// Trains `steps` Adam steps (a large learning rate: rounding differences
/// would show) on `comm`'s shard of global batches of `LB * size`, from a
/// checkpoint in `resume` if given; returns every parameter in f64 and the
/// mean losses. Rank 0 saves a checkpoint at the end into `save`.
fn train<E, const LB: usize, C: Communicator>(
    comm: C,
    steps: usize,
    resume: Option<&Path>,
    save: Option<&Path>,
) -> (Vec<f64>, Vec<f64>)
where
    E: ReduceDtype + Element,
    Cpu: HostGradients<E> + Device<E>,
    Net: BuildOnDevice<Cpu, E>,
    <Net as BuildOnDevice<Cpu, E>>::Built: TensorCollection<E, Cpu>
        + Module<
            Tensor<Rank4<LB, 1, 8, 8>, E, Cpu, OwnedTape<E, Cpu>>,
            Output = Tensor<Rank2<LB, 10>, E, Cpu, OwnedTape<E, Cpu>>,
            Error = <Cpu as HasErr>::Err,
        >,
{
    let mut dp = DataParallel::new(comm);
    let dev = Cpu::seed_from_u64(SEED);
    let (data, _) = digits::load().unwrap();
    let cfg = LoaderConfig::new(SEED).shard(dp.rank(), dp.size());
    let mut loader = Loader::<Rank3<1, 8, 8>, LB, E, Cpu>::new(data, &dev, cfg).unwrap();
    let mut state: TrainState<_, Tx, E, Cpu> =
        TrainState::create(dev.build_module::<Net, E>(), adam(0.05)).unwrap();
    dp.check_agree(&state.params, &[("global batch", (LB * dp.size()) as u64)])
        .unwrap();
    if let Some(dir) = resume {
        let ckpt = CheckpointManager::new(dir, 2)
            .unwrap()
            .restore_latest()
            .unwrap()
            .expect("a checkpoint to resume from");
        ckpt.restore()
            .part("train", &mut state)
            .part("data", &mut loader)
            .apply()
            .unwrap();
    }
    let mut losses = Vec::new();
    for _ in 0..steps {
        let (x, y) = loader.next_batch().unwrap();
        let (loss, mut grads) = state
            .value_and_grad(|m, tape| {
                softmax_cross_entropy_with_integer_labels(m.forward(x.put_tape(tape)), y).mean()
            })
            .unwrap();
        dp.all_reduce_mean(&state.params, &mut grads).unwrap();
        state.apply_gradients(grads).unwrap();
        losses.push(dp.mean(loss.array().to_f64().unwrap()));
    }
    if let (Some(dir), true) = (save, dp.is_root()) {
        let mut ckpt = Checkpoint::new(state.step());
        ckpt.add("train", &state)
            .unwrap()
            .add("data", &loader)
            .unwrap();
        CheckpointManager::new(dir, 2).unwrap().save(&ckpt).unwrap();
    }
    dp.barrier();
    let params = Params::of(&state.params).unwrap();
    let values = params
        .leaves()
        .iter()
        .flat_map(|l| l.as_vec())
        .map(|v| v.to_f64().unwrap())
        .collect();
    (values, losses)
}

/// Writes a child's result as the bit patterns of its values, exact.
fn write(out: &Path, name: &str, rank: usize, values: &[f64]) {
    let text: Vec<String> = values.iter().map(|v| v.to_bits().to_string()).collect();
    std::fs::write(out.join(format!("{name}.{rank}")), text.join("\n")).unwrap();
}

fn read(out: &Path, name: &str, rank: usize) -> Vec<f64> {
    let path = out.join(format!("{name}.{rank}"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} was not written: {e}", path.display()));
    text.lines()
        .map(|l| f64::from_bits(l.parse().unwrap()))
        .collect()
}

/// The scratch directory of a child run, or `None` in a plain test run.
fn child_out() -> Option<PathBuf> {
    std::env::var_os(OUT_VAR).map(PathBuf::from)
}

/// What `mpirun` printed and how it ended.
struct Job {
    ok: bool,
    output: String,
    took: Duration,
}

/// Runs the ignored test `test` of this binary on `np` ranks under
/// `mpirun`, killing it after `limit`.
fn mpirun(np: usize, test: &str, out: &Path, limit: Duration) -> Job {
    let exe = std::env::current_exe().unwrap();
    let log = out.join(format!("{test}.log"));
    let started = Instant::now();
    let mut child = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(np.to_string())
        .arg(&exe)
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(OUT_VAR, out)
        .env("RAYON_NUM_THREADS", "1")
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::options().append(true).open(&log).unwrap(),
        ))
        .spawn()
        .expect("mpirun (OpenMPI) must be on the PATH for the mpi tests");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "mpirun {test} hung for more than {limit:?}:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Job {
        ok: status.success(),
        output: std::fs::read_to_string(&log).unwrap_or_default(),
        took: started.elapsed(),
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flaxen-dist-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run_ok(test: &str, out: &Path) {
    let job = mpirun(2, test, out, Duration::from_secs(300));
    assert!(job.ok, "mpirun -np 2 {test} failed:\n{}", job.output);
}

/// The largest difference relative to `b`'s largest magnitude (the
/// project's NaN-keeping measure, with that magnitude as its floor).
fn max_rel(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    fixture::max_rel_error(a, b, scale)
}

// --- the children, run by mpirun ----------------------------------------

#[test]
#[ignore = "a rank of `two_ranks_equal_one_process_*`, started by mpirun"]
fn rank_plain() {
    let Some(out) = child_out() else { return };
    let comm = Mpi::init().unwrap();
    let rank = comm.rank();
    let (p32, l32) = train::<f32, B, _>(&comm, STEPS, None, None);
    let (p64, l64) = train::<f64, B, _>(&comm, STEPS, None, None);
    write(&out, "f32", rank, &p32);
    write(&out, "f64", rank, &p64);
    write(&out, "loss32", rank, &l32);
    write(&out, "loss64", rank, &l64);
}

#[test]
#[ignore = "a rank of `a_resumed_two_rank_run_equals_an_uninterrupted_one`, started by mpirun"]
fn rank_resume() {
    let Some(out) = child_out() else { return };
    let comm = Mpi::init().unwrap();
    let rank = comm.rank();
    let ckpts = out.join("checkpoints");
    let (whole, _) = train::<f32, B, _>(&comm, STEPS, None, None);
    train::<f32, B, _>(&comm, STEPS / 2, None, Some(&ckpts));
    let (resumed, _) = train::<f32, B, _>(&comm, STEPS - STEPS / 2, Some(&ckpts), None);
    write(&out, "whole", rank, &whole);
    write(&out, "resumed", rank, &resumed);
}

#[test]
#[ignore = "a rank of `a_rank_that_fails_ends_the_job`, started by mpirun"]
fn rank_fails() {
    let Some(_) = child_out() else { return };
    let dp = DataParallel::new(Mpi::init().unwrap());
    if dp.rank() == 1 {
        dp.abort(&"the data set on this rank is unreadable (a test of the abort path)");
    }
    // Rank 0 waits for rank 1 in a collective that never completes.
    dp.mean(1.0);
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
#[ignore = "a rank of `a_rank_that_panics_ends_the_job`, started by mpirun"]
fn rank_panics() {
    let Some(_) = child_out() else { return };
    let dp = DataParallel::new(Mpi::init().unwrap());
    if dp.rank() == 1 {
        panic!("a bug on rank 1 (a test of the panic path)");
    }
    dp.mean(1.0);
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
#[ignore = "a rank of `a_killed_rank_ends_the_job`, started by mpirun"]
fn rank_killed() {
    let Some(_) = child_out() else { return };
    let dp = DataParallel::new(Mpi::init().unwrap());
    dp.barrier();
    if dp.rank() == 1 {
        // As the kernel's OOM killer would.
        let _ = Command::new("kill")
            .args(["-9", &std::process::id().to_string()])
            .status();
        std::thread::sleep(Duration::from_secs(600));
    }
    dp.mean(1.0);
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
#[ignore = "a rank of `ranks_with_different_seeds_are_refused`, started by mpirun"]
fn rank_mismatch() {
    let Some(out) = child_out() else { return };
    let dp = DataParallel::new(Mpi::init().unwrap());
    let dev = Cpu::seed_from_u64(SEED + dp.rank() as u64);
    let model = dev.build_module::<Net, f32>();
    let err = dp.check_agree(&model, &[]).unwrap_err();
    assert!(matches!(err, DistError::Mismatch { rank: 1, .. }), "{err}");
    std::fs::write(out.join(format!("mismatch.{}", dp.rank())), err.to_string()).unwrap();
}

// --- the tests ------------------------------------------------------------

#[test]
fn two_ranks_equal_one_process_with_the_global_batch() {
    let out = scratch("plain");
    run_ok("rank_plain", &out);
    let (p32, l32) = train::<f32, { 2 * B }, _>(Local, STEPS, None, None);
    let (p64, l64) = train::<f64, { 2 * B }, _>(Local, STEPS, None, None);
    for (name, one, tol) in [("f32", &p32, 1e-5), ("f64", &p64, 1e-12)] {
        let r0 = read(&out, name, 0);
        let r1 = read(&out, name, 1);
        assert!(r0 == r1, "{name}: the two ranks' parameters differ");
        let err = max_rel(&r0, one);
        assert!(
            err <= tol,
            "{name}: 2 ranks vs 1 process: {err:e} > {tol:e}"
        );
        eprintln!("{name}: 2 ranks vs 1 process, max relative difference {err:e}");
    }
    for (name, one, tol) in [("loss32", &l32, 1e-5), ("loss64", &l64, 1e-12)] {
        let err = max_rel(&read(&out, name, 0), one);
        assert!(err <= tol, "{name}: {err:e} > {tol:e}");
    }
    // The run trained: the loss fell.
    assert!(l64[STEPS - 1] < l64[0], "{l64:?}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_resumed_two_rank_run_equals_an_uninterrupted_one() {
    let out = scratch("resume");
    run_ok("rank_resume", &out);
    for rank in 0..2 {
        assert!(
            read(&out, "whole", rank) == read(&out, "resumed", rank),
            "rank {rank}: the resumed run differs from the uninterrupted one"
        );
    }
    // The same checkpoint resumes in one process with the global batch.
    let (one, _) = train::<f32, { 2 * B }, _>(
        Local,
        STEPS - STEPS / 2,
        Some(&out.join("checkpoints")),
        None,
    );
    let err = max_rel(&one, &read(&out, "whole", 0));
    assert!(err <= 1e-5, "resumed on 1 process: {err:e}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_rank_that_fails_ends_the_job() {
    let out = scratch("fails");
    let job = mpirun(2, "rank_fails", &out, Duration::from_secs(120));
    assert!(!job.ok, "the job succeeded:\n{}", job.output);
    assert!(
        job.output
            .contains("error on rank 1 of 2: the data set on this rank is unreadable"),
        "{}",
        job.output
    );
    eprintln!("a failing rank ended the job in {:?}", job.took);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_rank_that_panics_ends_the_job() {
    let out = scratch("panics");
    let job = mpirun(2, "rank_panics", &out, Duration::from_secs(120));
    assert!(!job.ok, "the job succeeded:\n{}", job.output);
    assert!(
        job.output
            .contains("rank 1 of 2 panicked: aborting the job"),
        "{}",
        job.output
    );
    eprintln!("a panicking rank ended the job in {:?}", job.took);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_killed_rank_ends_the_job() {
    let out = scratch("killed");
    let job = mpirun(2, "rank_killed", &out, Duration::from_secs(120));
    assert!(!job.ok, "the job succeeded:\n{}", job.output);
    assert!(
        job.output.contains("signal 9"),
        "mpirun did not say a rank was killed:\n{}",
        job.output
    );
    eprintln!("a killed rank ended the job in {:?}", job.took);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn ranks_with_different_seeds_are_refused() {
    let out = scratch("mismatch");
    run_ok("rank_mismatch", &out);
    for rank in 0..2 {
        let msg = std::fs::read_to_string(out.join(format!("mismatch.{rank}"))).unwrap();
        assert!(
            msg.contains("rank 1 disagrees with rank 0 on the initial parameter values"),
            "{msg}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
