//! [`keep_freed_memory`]: a glibc malloc setting that training loops on the
//! CPU want.

/// Tells glibc's malloc to keep freed memory in the process instead of
/// handing large blocks back to the kernel. Returns whether the setting was
/// applied: `true` on Linux with glibc, `false` (and nothing changes)
/// elsewhere.
///
/// dfdx allocates a fresh buffer for every activation and gradient of every
/// step. By default glibc serves blocks over 128 KiB with `mmap` and unmaps
/// them on `free`, so each step page-faults all of them in again: a third
/// of a small CNN's training step, measured on `examples/bench_layers`.
/// XLA avoids this with its own arena. After this call, blocks under
/// 32 MiB come from the heap and the heap is never trimmed, so the
/// process keeps the peak memory of one step.
///
/// Call it once, first thing in `main`, before any other thread exists
/// (glibc's `mallopt` is not thread-safe). Programs that cannot change
/// code get the same with
/// `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295`.
///
/// ```
/// flaxen_runtime::malloc::keep_freed_memory();
/// ```
pub fn keep_freed_memory() -> bool {
    imp::keep_freed_memory()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;

    pub fn keep_freed_memory() -> bool {
        // SAFETY: `mallopt` only changes glibc's allocator tuning; the
        // caller runs this before other threads exist (see the docs).
        unsafe {
            mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, i32::MAX) == 1
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub fn keep_freed_memory() -> bool {
        false
    }
}
