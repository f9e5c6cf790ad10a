//! [`use_this_thread`]: the training loop's thread as one of the threads the
//! CPU kernels split their work over.

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
