//! Reused host buffers for the kernels' scratch space (input copies, im2col
//! matrices, partial sums).
//!
//! A training step needs the same few large buffers every time; getting
//! them fresh from the allocator costs a page fault per 4 KiB each step
//! (glibc hands large blocks back to the kernel), which measured as a
//! fifth of a step. Buffers go back to a small per-dtype pool when dropped.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// At most this many idle buffers, and this many bytes, stay pooled.
const MAX_IDLE: usize = 32;
const MAX_IDLE_BYTES: usize = 256 << 20;

/// The idle buffers of one element type.
pub(crate) struct Pool<E>(Mutex<Vec<Vec<E>>>);

impl<E> Pool<E> {
    pub(crate) const fn new() -> Self {
        Self(Mutex::new(Vec::new()))
    }
}

/// Element types with a buffer pool.
pub(crate) trait Pooled: Copy + Default + Send + Sync + 'static {
    fn pool() -> &'static Pool<Self>;
}

impl Pooled for f32 {
    fn pool() -> &'static Pool<Self> {
        static POOL: Pool<f32> = Pool::new();
        &POOL
    }
}

impl Pooled for f64 {
    fn pool() -> &'static Pool<Self> {
        static POOL: Pool<f64> = Pool::new();
        &POOL
    }
}

/// A buffer of `len` elements from the pool. Its contents are unspecified
/// (stale values from an earlier use): callers overwrite what they read.
///
/// `buf.len()` is how much of the allocation has ever been initialised,
/// which may exceed `len`: a reused buffer is only filled past that mark,
/// so taking a large buffer from the pool costs no pass over it.
pub(crate) struct Scratch<E: Pooled> {
    buf: Vec<E>,
    len: usize,
}

impl<E: Pooled> Scratch<E> {
    /// A buffer of exactly `len` elements, reusing the smallest idle one
    /// that is large enough.
    pub(crate) fn new(len: usize) -> Self {
        let mut buf = {
            let mut idle = E::pool().0.lock().unwrap_or_else(|e| e.into_inner());
            let best = idle
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= len)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            best.map(|i| idle.swap_remove(i)).unwrap_or_default()
        };
        if buf.len() < len {
            buf.resize(len, E::default());
        }
        Self { buf, len }
    }

    /// A buffer of `len` zeros.
    pub(crate) fn zeroed(len: usize) -> Self {
        let mut s = Self::new(len);
        s.fill(E::default());
        s
    }
}

impl<E: Pooled> Drop for Scratch<E> {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.capacity() == 0 {
            return;
        }
        let mut idle = E::pool().0.lock().unwrap_or_else(|e| e.into_inner());
        let bytes: usize =
            idle.iter().map(|b| b.capacity()).sum::<usize>() * std::mem::size_of::<E>();
        if idle.len() < MAX_IDLE
            && bytes + buf.capacity() * std::mem::size_of::<E>() <= MAX_IDLE_BYTES
        {
            idle.push(buf);
        }
    }
}

impl<E: Pooled> Deref for Scratch<E> {
    type Target = [E];
    fn deref(&self) -> &[E] {
        &self.buf[..self.len]
    }
}

impl<E: Pooled> DerefMut for Scratch<E> {
    fn deref_mut(&mut self) -> &mut [E] {
        &mut self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused() {
        let ptr = {
            let s = Scratch::<f64>::new(12345);
            s.as_ptr()
        };
        let mut s = Scratch::<f64>::new(12000);
        assert_eq!(s.len(), 12000);
        assert_eq!(s.as_ptr(), ptr);
        s[11999] = 3.0;
        drop(s);
        // Reused past its earlier length: the tail is initialised, and a
        // zeroed buffer is zero everywhere it shows.
        let s = Scratch::<f64>::zeroed(12345);
        assert_eq!(s.len(), 12345);
        assert!(s.iter().all(|&v| v == 0.0));
        assert!(Scratch::<f64>::zeroed(7).iter().all(|&v| v == 0.0));
    }
}
