//! Dense (fully connected) kernels: one gemm per pass, split across rayon
//! threads by gemm itself when the product is large enough to pay for it.

use super::gemm::{matmul_threads, Mat, MatMut};
use super::Elem;

/// Products below this many multiply-adds run on the calling thread: for
/// them, waking the pool costs more than it saves.
const PARALLEL_MACS: usize = 1 << 20;

fn threads(macs: usize) -> usize {
    if macs >= PARALLEL_MACS {
        rayon::current_num_threads()
    } else {
        1
    }
}

/// `y = x w^T + b` for `x` `(batch, i)`, `w` `(o, i)`, `b` `(o,)`.
pub(super) fn forward<E: Elem>(
    batch: usize,
    i: usize,
    o: usize,
    x: &[E],
    w: &[E],
    b: &[E],
) -> Vec<E> {
    // Every row starts as the bias (no zeroing pass first); the gemm adds
    // the product.
    let mut y = Vec::with_capacity(batch * o);
    for _ in 0..batch {
        y.extend_from_slice(b);
    }
    matmul_threads(
        MatMut::rows(&mut y, batch, o),
        true,
        Mat::rows(x, batch, i),
        Mat::transposed(w, i, o),
        threads(batch * i * o),
    );
    y
}

/// `dx += dy w`.
pub(super) fn backward_x<E: Elem>(
    batch: usize,
    i: usize,
    o: usize,
    w: &[E],
    dy: &[E],
    dx: &mut [E],
) {
    matmul_threads(
        MatMut::rows(dx, batch, i),
        true,
        Mat::rows(dy, batch, o),
        Mat::rows(w, o, i),
        threads(batch * i * o),
    );
}

/// `dw += dy^T x`.
pub(super) fn backward_w<E: Elem>(
    batch: usize,
    i: usize,
    o: usize,
    x: &[E],
    dy: &[E],
    dw: &mut [E],
) {
    matmul_threads(
        MatMut::rows(dw, o, i),
        true,
        Mat::transposed(dy, o, batch),
        Mat::rows(x, batch, i),
        threads(batch * i * o),
    );
}

/// `db += sum over the batch of dy`.
pub(super) fn backward_b<E: Elem>(o: usize, dy: &[E], db: &mut [E]) {
    for row in dy.chunks_exact(o.max(1)) {
        db.iter_mut().zip(row).for_each(|(d, &g)| *d += g);
    }
}
