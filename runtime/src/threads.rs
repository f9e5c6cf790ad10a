//! [`use_this_thread`]: the training loop's thread as one of the threads the
//! CPU kernels split their work over; [`keep_awake`]: the pool's other
//! threads kept from sleeping while a `scan!` runs its steps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Builds rayon's global thread pool, which flaxen's CPU kernels (and gemm's
/// and dfdx's) split their work over, with the calling thread as one of its
/// threads. Returns whether it did: `false` when the pool already existed
/// (a parallel kernel ran first, or it was built elsewhere), and nothing
/// changes then.
///
/// Without this, every thread of the pool is rayon's own, and each parallel
/// kernel called from the training loop's thread is handed over: queued,
/// a worker woken, and the caller put to sleep until the kernel is done. A
/// training step runs dozens of kernels. With this, the loop's thread runs
/// its share of each kernel itself, and the other threads steal the rest:
/// on a 2-core machine the seed CNN's step (`bench_scan`'s W2) ran
/// 1.06-1.12× as fast in four of five alternated runs, and W1's smaller
/// step 1.15-1.21×. The results are the same, bit for bit (tested).
///
/// Call it once, first thing in `main` (like
/// [`keep_freed_memory`](crate::malloc::keep_freed_memory)), from the thread
/// that runs the training loop; that thread stays in the pool for the rest
/// of the process. `RAYON_NUM_THREADS` still sets the pool's size, this
/// thread included: with 1 every kernel runs on the calling thread.
///
/// ```
/// // In a doc test the pool may already exist; in `main` this is `true`.
/// let _: bool = flaxen_runtime::threads::use_this_thread();
/// ```
pub fn use_this_thread() -> bool {
    rayon::ThreadPoolBuilder::new()
        .use_current_thread()
        .build_global()
        .is_ok()
}

/// Whether `scan!` keeps the pool awake on the CPU ([`set_awake_in_scan`]).
static AWAKE_IN_SCAN: AtomicBool = AtomicBool::new(true);

/// Turns off (or back on) what `scan!` does on the CPU by default: keeping
/// rayon's other threads awake for the K steps ([`keep_awake`]). Off, a
/// scan runs its steps exactly as a loop of K calls does; the results are
/// the same bit for bit either way. For a machine whose idle cores other
/// work should have during a scan's serial parts.
///
/// ```
/// flaxen_runtime::threads::set_awake_in_scan(false);
/// # flaxen_runtime::threads::set_awake_in_scan(true);
/// ```
pub fn set_awake_in_scan(enabled: bool) {
    AWAKE_IN_SCAN.store(enabled, Ordering::Relaxed);
}

/// Whether `scan!` keeps the pool awake (see [`set_awake_in_scan`]).
pub fn awake_in_scan() -> bool {
    AWAKE_IN_SCAN.load(Ordering::Relaxed)
}

/// A thread that found no job for this long stops spinning and goes back
/// to rayon's own idle loop (and sleep): a step that waits on something
/// else (I/O, an MPI all-reduce, a GPU) then costs a spinning core no more
/// than this.
const IDLE_LIMIT: Duration = Duration::from_millis(20);

/// How long one spinner job spins at most before it queues its successor
/// and returns (see [`Spinner::run`]).
const BURST: Duration = Duration::from_micros(20);

/// The guard [`keep_awake`] returns; dropping it lets the threads sleep.
#[must_use = "the threads stay awake only while the guard lives"]
#[derive(Debug)]
pub struct KeepAwake {
    stop: Arc<AtomicBool>,
}

impl Drop for KeepAwake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

std::thread_local! {
    /// Set while this thread runs a spinner, so that a spinner it picks up
    /// from inside a job it runs (a nested one) returns at once.
    static SPINNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Keeps rayon's other threads awake until the guard is dropped: each one
/// runs a spinner that takes the pool's jobs the moment they are queued
/// (`rayon::yield_now`) instead of going to sleep between them. `scan!`
/// holds one for its K steps on the CPU.
///
/// Why: a training step alternates parallel kernels with serial work on
/// the calling thread (the tape, the loss, small tensor ops). In each
/// serial gap longer than rayon's brief spin, the other threads fall
/// asleep, and the next kernel pays for waking them: a few microseconds
/// before they start, dozens of times a step. A scan knows that K steps
/// follow back to back, so it can keep them awake for all of them; a loop
/// of K plain calls cannot. `bench_scan` measured `scan!(5)` at 1.00-1.20×
/// the naive loop on W1 (median 1.13) and 1.02-1.10× on W2 (median 1.05)
/// in nine runs on 2 cores, against 0.94-1.00 and 0.96-1.00 without it.
///
/// The cost is cores that spin instead of sleeping during the serial gaps
/// (a spinner that finds no job for 20 ms goes back to sleep, so a step
/// that waits on I/O or another process does not keep a core busy). What
/// runs, and in what order within each kernel, is unchanged: the results
/// are the same bit for bit. Nothing happens with one thread in the pool.
///
/// ```
/// use rayon::prelude::*;
/// let awake = flaxen_runtime::threads::keep_awake();
/// let s: u64 = (0..1000u64).into_par_iter().sum();
/// drop(awake);
/// assert_eq!(s, 499_500);
/// ```
pub fn keep_awake() -> KeepAwake {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = rayon::current_num_threads();
    if threads > 1 {
        let owner = std::thread::current().id();
        // The calling thread runs its own share; when it is not one of the
        // pool's threads, every pool thread gets a spinner.
        let others = if rayon::current_thread_index().is_some() {
            threads - 1
        } else {
            threads
        };
        for _ in 0..others {
            Spinner {
                stop: Arc::clone(&stop),
                owner,
                idle_since: Instant::now(),
            }
            .queue();
        }
    }
    KeepAwake { stop }
}

/// One pool thread's spinning, as a chain of short rayon jobs.
struct Spinner {
    stop: Arc<AtomicBool>,
    /// The thread that holds the guard.
    owner: std::thread::ThreadId,
    /// When this chain last ran a job.
    idle_since: Instant,
}

impl Spinner {
    fn queue(self) {
        rayon::spawn(move || self.run());
    }

    /// Runs the pool's jobs as they are queued, until one has run or
    /// [`BURST`] has passed; then queues its successor (which the thread
    /// picks up next) and returns. Ends the chain at `stop`, or when no job
    /// came for [`IDLE_LIMIT`].
    ///
    /// Returning that often matters when a thread picks the spinner up
    /// while it waits inside another job (rayon's threads run queued jobs
    /// while they wait): that job resumes at most a burst or one job later,
    /// not at `stop`, which may itself wait for that job. For the same
    /// reason a spinner picked up by a thread that already spins ends its
    /// chain at once, and so does one picked up by the guard's own thread,
    /// which runs queued jobs only while it waits inside a kernel (queued
    /// again, it would sit above that kernel's own job in the thread's
    /// queue, and be taken again instead of it).
    fn run(mut self) {
        if self.stop.load(Ordering::Acquire)
            || SPINNING.get()
            || std::thread::current().id() == self.owner
        {
            return;
        }
        SPINNING.set(true);
        let start = Instant::now();
        let mut polls = 0u32;
        let next = loop {
            if self.stop.load(Ordering::Acquire) {
                break false;
            }
            match rayon::yield_now() {
                Some(rayon::Yield::Executed) => {
                    self.idle_since = Instant::now();
                    break true;
                }
                Some(rayon::Yield::Idle) => {
                    polls = polls.wrapping_add(1);
                    if !polls.is_multiple_of(64) {
                        std::hint::spin_loop();
                        continue;
                    }
                    // Now and then (not every poll: a poll costs less than
                    // reading the clock) the core goes to any other thread
                    // that wants it, on a machine running more threads than
                    // cores; on an otherwise idle core this returns at once.
                    std::thread::yield_now();
                    if start.elapsed() > BURST {
                        break self.idle_since.elapsed() < IDLE_LIMIT;
                    }
                }
                None => break false,
            }
        };
        SPINNING.set(false);
        if next {
            self.queue();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::Yield;

    fn spinner(owner: std::thread::ThreadId) -> (Spinner, Arc<AtomicBool>) {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Spinner {
            stop: Arc::clone(&stop),
            owner,
            idle_since: Instant::now(),
        };
        (s, stop)
    }

    /// A thread id that is not this thread's.
    fn another_thread() -> std::thread::ThreadId {
        std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap()
    }

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    /// A spinner that the guard's own thread picks up, or that a thread
    /// already spinning picks up, returns without queueing a successor: in
    /// the owner's queue it would sit above the job the owner waits to
    /// take, and be taken again instead, for ever.
    #[test]
    fn a_spinner_on_the_owner_or_nested_ends_its_chain() {
        pool(2).install(|| {
            spinner(std::thread::current().id()).0.run();
            assert_eq!(rayon::yield_local(), Some(Yield::Idle));
            SPINNING.set(true);
            spinner(another_thread()).0.run();
            SPINNING.set(false);
            assert_eq!(rayon::yield_local(), Some(Yield::Idle));
        });
    }

    /// Elsewhere, a spinner that finds no job queues its successor after a
    /// burst, and one whose guard is gone does not.
    #[test]
    fn a_spinner_queues_its_successor_until_stopped() {
        let other = another_thread();
        pool(1).install(|| {
            let (s, stop) = spinner(other);
            s.run();
            stop.store(true, Ordering::Release);
            // The successor, which sees `stop` and returns.
            assert_eq!(rayon::yield_local(), Some(Yield::Executed));
            assert_eq!(rayon::yield_local(), Some(Yield::Idle));
        });
    }

    /// With one thread in the pool there is nobody to keep awake.
    #[test]
    fn one_thread_gets_no_spinner() {
        pool(1).install(|| {
            let _awake = keep_awake();
            assert_eq!(rayon::yield_local(), Some(Yield::Idle));
        });
    }
}
