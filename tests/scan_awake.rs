//! `scan!` keeps rayon's other threads awake for its K steps on the CPU
//! (`threads::keep_awake`). The steps' results stay the same bit for bit,
//! and nothing stalls: scans started from outside the pool, from its own
//! threads, several at once, with a long serial gap in the step, or with
//! the feature turned off; and no thread spins after the scan.
//!
//! The tests take turns (one lock) on a pool of 3 threads, so that the CPU
//! time check sees only its own test.

use std::sync::mpsc;
use std::sync::{Mutex, Once};
use std::time::Duration;

use flaxen::prelude::*;
use flaxen::runtime::scan::stack_batches;
use flaxen::runtime::threads::{keep_awake, set_awake_in_scan};
use rayon::prelude::*;

#[path = "common/small_cnn.rs"]
mod small_cnn;
use small_cnn::{init, step, values, Batch, Dev, State};

const K: usize = 4;

/// The pool the kernels run on: 3 threads whatever the machine, so that a
/// scan always has threads to keep awake.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static POOL: Once = Once::new();
    static TURN: Mutex<()> = Mutex::new(());
    POOL.call_once(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build_global()
            .expect("this test binary builds the pool first");
    });
    assert_eq!(rayon::current_num_threads(), 3);
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on a thread of its own and fails if it has not returned within
/// a minute (a stalled scan would otherwise hang the test run).
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the scan stalled (or panicked)")
}

fn batches() -> Vec<Batch> {
    let dev = Dev::seed_from_u64(11);
    (0..K)
        .map(|i| (dev.sample_normal(), dev.tensor([i % 10; 64])))
        .collect()
}

/// The parameters and losses after K steps.
type Outcome = (Vec<f32>, Vec<f32>);

fn outcome(s: &State, losses: Vec<f32>) -> Outcome {
    (values(s), losses)
}

/// K plain calls of `step`.
fn plain() -> Outcome {
    let mut s = init();
    let mut losses = Vec::new();
    for b in batches() {
        let (next, loss) = step(s, b);
        s = next;
        losses.push(loss.array());
    }
    outcome(&s, losses)
}

/// `scan!(4, f, ..)` over the same batches, stacked.
fn scan_with(f: impl FnMut(State, Batch) -> (State, Loss<f32, Dev>)) -> Outcome {
    let bs: [Batch; K] = batches().try_into().ok().unwrap();
    let (s, losses) = scan!(4, f, init(), stack_batches(bs));
    outcome(&s, losses.array().to_vec())
}

/// `scan!(4, step, ..)`.
fn scanned() -> Outcome {
    scan_with(step)
}

#[test]
fn scans_from_inside_and_outside_the_pool_equal_plain_calls() {
    let _turn = turn();
    let want = within_a_minute(plain);
    assert!(!want.0.is_empty());
    // From a thread outside the pool: every pool thread spins.
    assert_eq!(within_a_minute(scanned), want);
    // On pool threads, two at once: each scan's spinners may be picked up by
    // the other scan's thread while it waits inside a kernel.
    let (a, b) = within_a_minute(|| rayon::join(scanned, scanned));
    assert_eq!(a, want);
    assert_eq!(b, want);
    // Inside a parallel iterator: as many scans as items, on every thread.
    let all: Vec<Outcome> = within_a_minute(|| (0..5).into_par_iter().map(|_| scanned()).collect());
    assert!(all.iter().all(|o| *o == want));
}

#[test]
fn a_step_with_a_long_serial_gap_still_finishes() {
    let _turn = turn();
    let want = within_a_minute(plain);
    // Each step first sleeps longer than a spinner waits for work.
    let got = within_a_minute(|| {
        scan_with(|s, b| {
            std::thread::sleep(Duration::from_millis(30));
            step(s, b)
        })
    });
    assert_eq!(got, want);
}

#[test]
fn turned_off_it_gives_the_same_bits() {
    let _turn = turn();
    let on = within_a_minute(scanned);
    set_awake_in_scan(false);
    let off = within_a_minute(scanned);
    set_awake_in_scan(true);
    assert_eq!(on, off);
    assert_eq!(on, within_a_minute(plain));
}

/// The process's user + system CPU time, in clock ticks (Linux).
#[cfg(target_os = "linux")]
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// After the guard is dropped (at the end of a scan, or by hand), the
/// threads stop spinning: the process uses next to no CPU while idle.
#[cfg(target_os = "linux")]
#[test]
fn no_thread_spins_after_the_scan() {
    let _turn = turn();
    within_a_minute(scanned);
    let guard = keep_awake();
    let s: u64 = (0..10_000u64).into_par_iter().sum();
    assert_eq!(s, 49_995_000);
    drop(guard);
    std::thread::sleep(Duration::from_millis(50));
    let before = cpu_ticks();
    std::thread::sleep(Duration::from_millis(500));
    let spent = cpu_ticks() - before;
    // Clock ticks are 10 ms: one thread spinning would spend about 50.
    assert!(spent <= 10, "{spent} ticks of CPU time in 500 ms idle");
}
