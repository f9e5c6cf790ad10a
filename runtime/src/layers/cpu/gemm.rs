//! A bounds-checked front for `gemm::gemm` on row/column-strided slices.

use rayon::prelude::*;

use super::{Elem, Shared};

/// A read-only `rows x cols` matrix in `data`, element `(i, j)` at
/// `i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a, E> {
    pub data: &'a [E],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

/// A writable matrix, laid out like [`Mat`].
pub(super) struct MatMut<'a, E> {
    pub data: &'a mut [E],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a, E> Mat<'a, E> {
    /// A row-major (C order) matrix.
    pub fn rows(data: &'a [E], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of a row-major `cols x rows` matrix, without moving data.
    pub fn transposed(data: &'a [E], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: 1,
            cs: rows,
        }
    }
}

impl<'a, E> MatMut<'a, E> {
    /// A row-major (C order) matrix.
    pub fn rows(data: &'a mut [E], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }
}

fn fits(len: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    rows == 0 || cols == 0 || (rows - 1) * rs + (cols - 1) * cs < len
}

/// `dst = lhs * rhs`, or `dst += lhs * rhs` when `accumulate`, on the
/// calling thread (the callers parallelise over examples).
///
/// # Panics
/// If the shapes disagree or a view reaches past its slice.
pub(super) fn matmul<E: Elem>(
    dst: MatMut<'_, E>,
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
) {
    matmul_threads(dst, accumulate, lhs, rhs, 1);
}

/// [`matmul`] on up to `threads` rayon threads (for one large product,
/// where splitting it beats running products side by side): one block of
/// rows or columns per thread, each a single-threaded gemm.
pub(super) fn matmul_threads<E: Elem>(
    dst: MatMut<'_, E>,
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
    threads: usize,
) {
    assert!(dst.rows == lhs.rows && dst.cols == rhs.cols && lhs.cols == rhs.rows);
    assert!(fits(dst.data.len(), dst.rows, dst.cols, dst.rs, dst.cs));
    assert!(fits(lhs.data.len(), lhs.rows, lhs.cols, lhs.rs, lhs.cs));
    assert!(fits(rhs.data.len(), rhs.rows, rhs.cols, rhs.rs, rhs.cs));
    if dst.rows == 0 || dst.cols == 0 {
        return;
    }
    if lhs.cols == 0 {
        if !accumulate {
            dst.data.iter_mut().for_each(|v| *v = E::zero());
        }
        return;
    }
    let mut dst = dst;
    if threads <= 1 && small_product(&mut dst, accumulate, lhs, rhs) {
        return;
    }
    let (m, n) = (dst.rows, dst.cols);
    let views = Views::new(&mut dst, accumulate, lhs, rhs);
    // Split the side whose blocks repack the smaller other operand: row
    // blocks each pack all of `rhs` (k x n), column blocks all of `lhs`.
    split(views, m, n, n <= m, threads);
}

/// The `m x n` product of `views` on up to `threads` rayon tasks, each a
/// block of rows (`by_rows`) or columns.
fn split<E: Elem>(views: Views<E>, m: usize, n: usize, by_rows: bool, threads: usize) {
    let len = if by_rows { m } else { n };
    let parts = if threads > 1 {
        threads.min(len / SPLIT)
    } else {
        1
    };
    if parts <= 1 {
        // SAFETY: the caller checked the views; `dst` aliases no input.
        return unsafe { views.block(0, m, 0, n) };
    }
    let per = len.div_ceil(parts).div_ceil(SPLIT) * SPLIT;
    (0..len.div_ceil(per)).into_par_iter().for_each(|b| {
        let (start, count) = (b * per, per.min(len - b * per));
        // SAFETY: as above; the blocks are disjoint parts of `dst` (rows
        // or columns `start..start + count`), each written by one task,
        // and all end before `dst`'s borrow does (rayon joins them).
        unsafe {
            if by_rows {
                views.block(start, count, 0, n)
            } else {
                views.block(0, m, start, count)
            }
        }
    });
}

/// Blocks of a split product are multiples of this many rows or columns
/// (gemm's `f32` tile on AVX-512 is 4 x 16 rows by 6 columns; 16 keeps
/// every block on whole vectors).
const SPLIT: usize = 16;

/// The three checked views of [`matmul_threads`] as pointers and strides.
#[derive(Clone, Copy)]
struct Views<E> {
    dst: Shared<E>,
    dst_rs: usize,
    dst_cs: usize,
    lhs: *const E,
    lhs_rs: usize,
    lhs_cs: usize,
    rhs: *const E,
    rhs_rs: usize,
    rhs_cs: usize,
    k: usize,
    accumulate: bool,
}
// SAFETY: the inputs are only read.
unsafe impl<E: Sync> Send for Views<E> {}
unsafe impl<E: Sync> Sync for Views<E> {}

impl<E: Elem> Views<E> {
    fn new(dst: &mut MatMut<'_, E>, accumulate: bool, lhs: Mat<'_, E>, rhs: Mat<'_, E>) -> Self {
        Views {
            dst: Shared(dst.data.as_mut_ptr()),
            dst_rs: dst.rs,
            dst_cs: dst.cs,
            lhs: lhs.data.as_ptr(),
            lhs_rs: lhs.rs,
            lhs_cs: lhs.cs,
            rhs: rhs.data.as_ptr(),
            rhs_rs: rhs.rs,
            rhs_cs: rhs.cs,
            k: lhs.cols,
            accumulate,
        }
    }

    /// Rows `i0..i0 + m` by columns `j0..j0 + n` of the product, by one
    /// single-threaded gemm. Products split this way measured faster than
    /// through gemm's own `Rayon` split, which hands out many small jobs
    /// (medians of 100 interleaved runs on two threads, a Dense layer of
    /// 3136 -> 256 at batch 32: forward `w xᵀ` 0.21-0.33 vs 0.28-0.40 ms,
    /// weight gradient 0.28-0.33 vs 0.31-0.34; its input gradient, split
    /// by columns, the same as gemm's).
    ///
    /// # Safety
    /// The block lies inside the checked views, and no other live
    /// reference overlaps its part of `dst`.
    unsafe fn block(&self, i0: usize, m: usize, j0: usize, n: usize) {
        unsafe {
            gemm::gemm(
                m,
                n,
                self.k,
                self.dst.0.add(i0 * self.dst_rs + j0 * self.dst_cs),
                self.dst_cs as isize,
                self.dst_rs as isize,
                self.accumulate,
                self.lhs.add(i0 * self.lhs_rs),
                self.lhs_cs as isize,
                self.lhs_rs as isize,
                self.rhs.add(j0 * self.rhs_cs),
                self.rhs_cs as isize,
                self.rhs_rs as isize,
                E::one(),
                E::one(),
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    }
}

/// The products gemm's packing makes slow, done directly: a short inner
/// dimension (a first convolution's `1 x 3 x 3` patch: each output row is
/// a few scaled rows of `rhs`) and a small output over a long inner
/// dimension (that convolution's weight gradient: a few hundred dot
/// products of contiguous rows). Returns `false`, touching nothing, for
/// the other shapes and layouts.
fn small_product<E: Elem>(
    dst: &mut MatMut<'_, E>,
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
) -> bool {
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    let short = k <= 16 && dst.cs == 1 && rhs.cs == 1 && n >= 16;
    let dots = m * n <= 1024 && k >= 64 && lhs.cs == 1 && rhs.rs == 1;
    if !(short || dots) {
        return false;
    }
    small_simd(short, dst, accumulate, lhs, rhs);
    true
}

simd_dispatch!(fn small_simd<E: Elem>(
    short: bool,
    dst: &mut MatMut<'_, E>,
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
) => small_any);

/// [`scaled_rows`] when `short`, else [`dot_products`].
#[inline(always)]
fn small_any<E: Elem>(
    short: bool,
    dst: &mut MatMut<'_, E>,
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
) {
    if short {
        scaled_rows(dst, accumulate, lhs, rhs);
    } else {
        dot_products(dst, accumulate, lhs, rhs);
    }
}

/// Each output row as a sum of `k` scaled rows of `rhs` (a short inner
/// dimension).
#[inline(always)]
fn scaled_rows<E: Elem>(
    dst: &mut MatMut<'_, E>,
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
) {
    /// Columns per block: four AVX-512 registers of `f32`, kept in
    /// registers over the whole inner dimension, so each output is loaded
    /// and stored once.
    const BLOCK: usize = 64;
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    for i in 0..m {
        let row = &mut dst.data[i * dst.rs..][..n];
        let a = |kk: usize| lhs.data[i * lhs.rs + kk * lhs.cs];
        let mut blocks = row.chunks_exact_mut(BLOCK);
        for (c, out) in (&mut blocks).enumerate() {
            let mut acc = [E::zero(); BLOCK];
            if accumulate {
                acc.copy_from_slice(out);
            }
            for kk in 0..k {
                let r: &[E; BLOCK] = rhs.data[kk * rhs.rs + c * BLOCK..][..BLOCK]
                    .try_into()
                    .expect("a block");
                let a = a(kk);
                for (s, &b) in acc.iter_mut().zip(r) {
                    *s += a * b;
                }
            }
            out.copy_from_slice(&acc);
        }
        let tail = blocks.into_remainder();
        let start = n - tail.len();
        if !accumulate {
            tail.iter_mut().for_each(|v| *v = E::zero());
        }
        for kk in 0..k {
            let r = &rhs.data[kk * rhs.rs + start..][..tail.len()];
            let a = a(kk);
            tail.iter_mut().zip(r).for_each(|(d, &b)| *d += a * b);
        }
    }
}

/// Each output as the dot product of a row of `lhs` and a column of `rhs`,
/// both contiguous (a small output over a long inner dimension).
#[inline(always)]
fn dot_products<E: Elem>(
    dst: &mut MatMut<'_, E>,
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
) {
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    for i in 0..m {
        let a = &lhs.data[i * lhs.rs..][..k];
        for j in 0..n {
            let b = &rhs.data[j * rhs.cs..][..k];
            let d = &mut dst.data[i * dst.rs + j * dst.cs];
            let dot = dot(a, b);
            *d = if accumulate { *d + dot } else { dot };
        }
    }
}

/// `a . b` with sixteen independent accumulators, so it vectorises.
#[inline(always)]
fn dot<E: Elem>(a: &[E], b: &[E]) -> E {
    let mut acc = [E::zero(); 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .fold(E::zero(), |s, (&x, &y)| s + x * y);
    for (x, y) in ca.zip(cb) {
        for ((s, &x), &y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    acc.iter().fold(tail, |s, &v| s + v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_with_transposes_and_accumulate() {
        // a: 2x3, b: 3x2 stored transposed (as 2x3 rows).
        let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bt = [1.0f64, 0.0, 1.0, 0.0, 1.0, 1.0];
        let mut c = [10.0f64; 4];
        matmul(
            MatMut::rows(&mut c, 2, 2),
            true,
            Mat::rows(&a, 2, 3),
            Mat::transposed(&bt, 3, 2),
        );
        assert_eq!(c, [14.0, 15.0, 20.0, 21.0]);
        matmul(
            MatMut::rows(&mut c, 2, 2),
            false,
            Mat::rows(&a, 2, 3),
            Mat::transposed(&bt, 3, 2),
        );
        assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
    }

    /// The direct paths give gemm's results: a short inner dimension and a
    /// small output over a long one, with and without accumulating.
    #[test]
    fn small_products_match_gemm() {
        let fill =
            |n: usize, k: f64| -> Vec<f64> { (0..n).map(|i| (i as f64 * k).sin()).collect() };
        for (m, n, k, rhs_t) in [(5, 40, 9, false), (7, 9, 300, true), (3, 20, 1, false)] {
            let a = fill(m * k, 0.37);
            let b = fill(k * n, 0.11);
            let rhs = if rhs_t {
                Mat::transposed(&b, k, n)
            } else {
                Mat::rows(&b, k, n)
            };
            for accumulate in [false, true] {
                let mut want = fill(m * n, 0.7);
                let mut got = want.clone();
                // Two threads skip the direct paths: gemm itself.
                matmul_threads(
                    MatMut::rows(&mut want, m, n),
                    accumulate,
                    Mat::rows(&a, m, k),
                    rhs,
                    2,
                );
                matmul(
                    MatMut::rows(&mut got, m, n),
                    accumulate,
                    Mat::rows(&a, m, k),
                    rhs,
                );
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() < 1e-12, "{m}x{n}x{k}: {g} vs {w}");
                }
            }
        }
    }

    /// A product split over two threads, by rows (`n <= m`) or by columns,
    /// ragged last blocks included, gives the one-block product's values.
    #[test]
    fn split_products_match_one_block() {
        let fill =
            |n: usize, k: f64| -> Vec<f64> { (0..n).map(|i| (i as f64 * k).sin()).collect() };
        for (m, n, k, lhs_t) in [(70, 20, 50, false), (20, 101, 50, true), (40, 40, 3, false)] {
            let a = fill(m * k, 0.37);
            let b = fill(k * n, 0.11);
            let lhs = if lhs_t {
                Mat::transposed(&a, m, k)
            } else {
                Mat::rows(&a, m, k)
            };
            let start = fill(m * n, 0.7);
            let (mut one, mut two) = (start.clone(), start.clone());
            // SAFETY: the views are the checked ones `matmul_threads` builds.
            let mut dst = MatMut::rows(&mut one, m, n);
            unsafe { Views::new(&mut dst, true, lhs, Mat::rows(&b, k, n)).block(0, m, 0, n) };
            matmul_threads(
                MatMut::rows(&mut two, m, n),
                true,
                lhs,
                Mat::rows(&b, k, n),
                2,
            );
            for (g, w) in two.iter().zip(&one) {
                assert!((g - w).abs() < 1e-12, "{m}x{n}x{k}: {g} vs {w}");
            }
        }
    }
}
