//! Dense (fully connected) kernels: one gemm per pass, split across rayon
//! threads by gemm itself when the product is large enough to pay for it.

use rayon::prelude::*;

use super::gemm::{matmul_threads, Mat, MatMut};
use super::scratch::Scratch;
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
    let macs = batch * i * o;
    if macs < PARALLEL_MACS || batch * o <= DOT_OUTPUTS {
        return rows_forward(batch, i, o, x, w, b, macs >= PARALLEL_MACS);
    }
    // gemm runs `x w^T` with `w` as a column-major right operand at a third
    // of its rate with every operand row-major (measured for 32 x 3136 x
    // 256: 70 vs 165 GFLOP/s on one thread, 46 vs 233 on two), so a large
    // product transposes whichever is smaller: the weight (many rows, such
    // as a Transformer's 2,048 tokens through 128 x 256), or `x` and `y`
    // (few rows, one per example, through a wide weight), computing `y^T =
    // w x^T`.
    if many_rows(batch, i, o) {
        let mut wt = Scratch::new(i * o);
        transpose_into(w, o, i, &mut wt);
        let mut y = bias_rows(batch, b);
        split_rows(batch, (&mut y, o), (x, i), Mat::rows(&wt, i, o));
        return y;
    }
    let mut xt = Scratch::new(i * batch);
    transpose_into(x, batch, i, &mut xt);
    let mut yt = Scratch::new(o * batch);
    for (row, &bias) in yt.chunks_exact_mut(batch).zip(b) {
        row.iter_mut().for_each(|v| *v = bias);
    }
    matmul_threads(
        MatMut::rows(&mut yt, o, batch),
        true,
        Mat::rows(w, o, i),
        Mat::rows(&xt, i, batch),
        threads(macs),
    );
    let mut y = vec![E::zero(); batch * o];
    transpose_into(&yt, o, batch, &mut y);
    y
}

/// Whether a product has many rows for its weight (a Transformer's 2,048
/// tokens through 128 x 128): then the rows are split over the rayon
/// threads, one single-threaded product each, which measured faster than
/// gemm's own split of the whole product, each way (2048 x 128 x 128 on two
/// threads, alternated: forward 180 → 281, `dx` 305 → 348, `dw` 276 → 352
/// GFLOP/s; never slower beyond the machine's noise on TEXT's other
/// shapes).
fn many_rows(batch: usize, i: usize, o: usize) -> bool {
    i > 0 && o > 0 && o * i <= batch * (i + o)
}

/// `out += lhs rhs` over `batch` rows (`out` and `lhs` with their row
/// widths), the rows split over the rayon threads, one single-threaded
/// product each (see [`many_rows`]).
fn split_rows<E: Elem>(batch: usize, out: (&mut [E], usize), lhs: (&[E], usize), rhs: Mat<'_, E>) {
    let ((out, ow), (lhs, lw)) = (out, lhs);
    let rows = super::chunking(batch);
    out.par_chunks_mut(rows * ow)
        .zip(lhs.par_chunks(rows * lw))
        .for_each(|(out, lhs)| {
            let n = out.len() / ow;
            matmul_threads(
                MatMut::rows(out, n, ow),
                true,
                Mat::rows(lhs, n, lw),
                rhs,
                1,
            );
        });
}

/// Outputs up to which a large product with few outputs (a classifier
/// head on a wide input: 32 x 10 outputs over 6,272 inputs) is computed as
/// one dot product per output instead of through gemm: gemm's split of so
/// small an output, and the two transposes around it, cost more than the
/// products (0.14-0.16 ms against 0.18-0.25 ms for that head on 2 threads,
/// measured in alternation).
const DOT_OUTPUTS: usize = 1024;

/// [`forward`] on the operands as they are: every row of `y` starts as the
/// bias (no zeroing pass first) and the product `x w^T` is added, on the
/// calling thread, or, when `split`, with the batch's rows split over the
/// rayon threads. For the shapes that reach here the product is `batch * o`
/// dot products of contiguous rows (`x`'s and `w`'s) once the inner
/// dimension is long.
fn rows_forward<E: Elem>(
    batch: usize,
    i: usize,
    o: usize,
    x: &[E],
    w: &[E],
    b: &[E],
    split: bool,
) -> Vec<E> {
    let mut y = bias_rows(batch, b);
    let product = |y: &mut [E], x: &[E]| {
        let n = y.len() / o.max(1);
        matmul_threads(
            MatMut::rows(y, n, o),
            true,
            Mat::rows(x, n, i),
            Mat::transposed(w, i, o),
            1,
        );
    };
    if split {
        let rows = super::chunking(batch);
        y.par_chunks_mut(rows * o.max(1))
            .zip(x.par_chunks(rows * i.max(1)))
            .for_each(|(y, x)| product(y, x));
    } else {
        product(&mut y, x);
    }
    y
}

/// `batch` rows, each the bias: the output a product is added into (no
/// zeroing pass first).
fn bias_rows<E: Elem>(batch: usize, b: &[E]) -> Vec<E> {
    let mut y = Vec::with_capacity(batch * b.len());
    for _ in 0..batch {
        y.extend_from_slice(b);
    }
    y
}

/// Writes the `cols x rows` transpose of the row-major `rows x cols`
/// matrix `m` into `out`, in 32 x 32 tiles (reads and writes both stay in
/// cache lines), blocks of 32 output rows split over the rayon threads.
fn transpose_into<E: Elem>(m: &[E], rows: usize, cols: usize, out: &mut [E]) {
    const TILE: usize = 32;
    out.par_chunks_mut(TILE * rows.max(1))
        .enumerate()
        .for_each(|(cb, block)| {
            let c0 = cb * TILE;
            let cn = block.len() / rows.max(1);
            for r0 in (0..rows).step_by(TILE) {
                for r in r0..(r0 + TILE).min(rows) {
                    let src = &m[r * cols + c0..][..cn];
                    for (c, &v) in src.iter().enumerate() {
                        block[c * rows + r] = v;
                    }
                }
            }
        });
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
    let threads = threads(batch * i * o);
    if threads > 1 && many_rows(batch, i, o) {
        split_rows(batch, (dx, i), (dy, o), Mat::rows(w, o, i));
        return;
    }
    matmul_threads(
        MatMut::rows(dx, batch, i),
        true,
        Mat::rows(dy, batch, o),
        Mat::rows(w, o, i),
        threads,
    );
}

/// `dw += dy^T x`: with many rows, one partial sum per thread over its
/// rows, then their sum.
pub(super) fn backward_w<E: Elem>(
    batch: usize,
    i: usize,
    o: usize,
    x: &[E],
    dy: &[E],
    dw: &mut [E],
) {
    let threads = threads(batch * i * o);
    if threads > 1 && many_rows(batch, i, o) {
        let rows = super::chunking(batch);
        let partials: Vec<Vec<E>> = x
            .par_chunks(rows * i)
            .zip(dy.par_chunks(rows * o))
            .map(|(x, dy)| {
                let n = x.len() / i;
                let mut part = vec![E::zero(); o * i];
                matmul_threads(
                    MatMut::rows(&mut part, o, i),
                    false,
                    Mat::transposed(dy, o, n),
                    Mat::rows(x, n, i),
                    1,
                );
                part
            })
            .collect();
        for part in partials {
            dw.iter_mut().zip(part).for_each(|(d, p)| *d += p);
        }
        return;
    }
    matmul_threads(
        MatMut::rows(dw, o, i),
        true,
        Mat::transposed(dy, o, batch),
        Mat::rows(x, batch, i),
        threads,
    );
}
pub(super) fn backward_b<E: Elem>(o: usize, dy: &[E], db: &mut [E]) {
    for row in dy.chunks_exact(o.max(1)) {
        db.iter_mut().zip(row).for_each(|(d, &g)| *d += g);
    }
}

#[cfg(test)]
mod tests {
    /// `forward`'s values against the definition, in f64.
    fn forward_matches_the_definition(batch: usize, i: usize, o: usize) {
        let x: Vec<f64> = (0..batch * i).map(|v| (v as f64 * 0.37).sin()).collect();
        let w: Vec<f64> = (0..o * i).map(|v| (v as f64 * 0.11).cos()).collect();
        let b: Vec<f64> = (0..o).map(|v| v as f64 * 0.5).collect();
        let y = super::forward(batch, i, o, &x, &w, &b);
        for r in 0..batch {
            for c in 0..o {
                let want: f64 = b[c] + (0..i).map(|k| x[r * i + k] * w[c * i + k]).sum::<f64>();
                assert!((y[r * o + c] - want).abs() < 1e-9, "y[{r}][{c}]");
            }
        }
    }

    /// Above the threshold the forward pass runs as `y^T = w x^T`: the same
    /// values as the definition.
    #[test]
    fn large_forward_matches_the_definition() {
        let (batch, i, o) = (5, 700, 301);
        assert!(batch * i * o >= super::PARALLEL_MACS && batch * o > super::DOT_OUTPUTS);
        forward_matches_the_definition(batch, i, o);
    }

    /// A large product with few outputs runs as dot products split over
    /// the threads (odd batch and output counts): the definition's values.
    #[test]
    fn few_output_forward_matches_the_definition() {
        let (batch, i, o) = (33, 4001, 9);
        assert!(batch * i * o >= super::PARALLEL_MACS && batch * o <= super::DOT_OUTPUTS);
        forward_matches_the_definition(batch, i, o);
    }

    /// Many rows through a small weight transpose the weight: the same
    /// values as the definition.
    #[test]
    fn many_row_forward_matches_the_definition() {
        let (batch, i, o) = (2049, 33, 130);
        assert!(batch * i * o >= super::PARALLEL_MACS && o * i <= batch * (i + o));
        forward_matches_the_definition(batch, i, o);
    }

    /// With many rows the backward passes split the rows over the threads
    /// (`dw` as partial sums): both add the definition's values into what
    /// the gradients held (odd sizes, ragged last chunk).
    #[test]
    fn many_row_backward_matches_the_definition() {
        let (batch, i, o) = (2049, 33, 130);
        assert!(batch * i * o >= super::PARALLEL_MACS && super::many_rows(batch, i, o));
        let x: Vec<f64> = (0..batch * i).map(|v| (v as f64 * 0.37).sin()).collect();
        let w: Vec<f64> = (0..o * i).map(|v| (v as f64 * 0.11).cos()).collect();
        let dy: Vec<f64> = (0..batch * o).map(|v| (v as f64 * 0.13).cos()).collect();
        let mut dx: Vec<f64> = (0..batch * i).map(|v| v as f64 * 1e-3).collect();
        let mut dw: Vec<f64> = (0..o * i).map(|v| v as f64 * 1e-2).collect();
        super::backward_x(batch, i, o, &w, &dy, &mut dx);
        super::backward_w(batch, i, o, &x, &dy, &mut dw);
        for r in (0..batch).step_by(97) {
            for c in 0..i {
                let want = (r * i + c) as f64 * 1e-3
                    + (0..o).map(|k| dy[r * o + k] * w[k * i + c]).sum::<f64>();
                assert!((dx[r * i + c] - want).abs() < 1e-9, "dx[{r}][{c}]");
            }
        }
        for r in 0..o {
            for c in 0..i {
                let want = (r * i + c) as f64 * 1e-2
                    + (0..batch)
                        .map(|k| dy[k * o + r] * x[k * i + c])
                        .sum::<f64>();
                assert!((dw[r * i + c] - want).abs() < 1e-9, "dw[{r}][{c}]");
            }
        }
    }

    #[test]
    fn transpose_is_exact_on_ragged_tiles() {
        let (rows, cols) = (37, 70);
        let m: Vec<f64> = (0..rows * cols).map(|v| v as f64).collect();
        let mut t = vec![0.0; rows * cols];
        super::transpose_into(&m, rows, cols, &mut t);
        for r in 0..rows {
            for c in 0..cols {
                assert_eq!(t[c * rows + r], m[r * cols + c]);
            }
        }
    }
}
