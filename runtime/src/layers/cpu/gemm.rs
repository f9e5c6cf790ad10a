//! A bounds-checked front for `gemm::gemm` on row/column-strided slices.

use super::{lanes, Elem};

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
/// where gemm's own split beats running products side by side).
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
    // SAFETY: the asserts above keep every strided access inside its slice,
    // `dst` is borrowed mutably so it aliases neither input, and `E` is f32
    // or f64 (the `Elem` impls), which gemm supports.
    unsafe {
        gemm::gemm(
            dst.rows,
            dst.cols,
            lhs.cols,
            dst.data.as_mut_ptr(),
            dst.cs as isize,
            dst.rs as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            E::one(),
            E::one(),
            false,
            false,
            false,
            match threads {
                0 | 1 => gemm::Parallelism::None,
                n => gemm::Parallelism::Rayon(n),
            },
        )
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
    /// Columns per pass: four independent accumulator chains (one chain
    /// waits on its own adds), the row of `lhs` loaded once for the four.
    const GROUP: usize = 4;
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    let col = |j: usize| &rhs.data[j * rhs.cs..][..k];
    for i in 0..m {
        let a = &lhs.data[i * lhs.rs..][..k];
        let mut put = |j: usize, dot: E| {
            let d = &mut dst.data[i * dst.rs + j * dst.cs];
            *d = if accumulate { *d + dot } else { dot };
        };
        let grouped = n / GROUP * GROUP;
        for j in (0..grouped).step_by(GROUP) {
            // `dots` gives `dot`'s values bit for bit (tested).
            let got = dots(a, lanes::<&[E], GROUP>(|t| col(j + t)));
            got.into_iter().enumerate().for_each(|(t, v)| put(j + t, v));
        }
        for j in grouped..n {
            put(j, dot(a, col(j)));
        }
    }
}

/// `a . b` with sixteen independent accumulators, so it vectorises.
#[inline(always)]
pub(super) fn dot<E: Elem>(a: &[E], b: &[E]) -> E {
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

/// [`dot`] of `a` with each of `bs` in one pass over `a`: each result is
/// `dot(a, bs[t])` bit for bit (the same 16 lanes, each adding its products
/// in the same order, then the same final sum), so a caller may swap one
/// for the other without changing a value.
///
/// # Panics
/// If a `b` is shorter than `a`.
#[inline(always)]
pub(super) fn dots<E: Elem, const T: usize>(a: &[E], bs: [&[E]; T]) -> [E; T] {
    let n = a.len() / 16 * 16;
    let ca = a[..n].as_chunks::<16>().0;
    let cb = bs.map(|b| b[..n].as_chunks::<16>().0);
    let mut acc = [[E::zero(); 16]; T];
    for (q, x) in ca.iter().enumerate() {
        for (acc, b) in acc.iter_mut().zip(&cb) {
            let (prev, y) = (*acc, &b[q]);
            *acc = lanes(|l| prev[l] + x[l] * y[l]);
        }
    }
    lanes(|t| {
        let tail = a[n..]
            .iter()
            .zip(&bs[t][n..a.len()])
            .fold(E::zero(), |s, (&x, &y)| s + x * y);
        acc[t].iter().fold(tail, |s, &v| s + v)
    })
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

    /// `dots` is `dot` per right operand, bit for bit, with and without a
    /// ragged tail.
    #[test]
    fn dots_are_dot_bit_for_bit() {
        let fill =
            |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).sin()).collect() };
        for n in [784, 100, 7] {
            let a = fill(n, 0.37);
            let bs: Vec<Vec<f32>> = (0..9).map(|t| fill(n, 0.11 + t as f32 * 0.05)).collect();
            let refs: [&[f32]; 9] = std::array::from_fn(|t| &bs[t][..]);
            let got = dots(&a, refs);
            for (t, b) in bs.iter().enumerate() {
                assert_eq!(got[t].to_bits(), dot(&a, b).to_bits(), "n {n} t {t}");
            }
        }
    }

    /// The direct paths give gemm's results: a short inner dimension and a
    /// small output over a long one, with and without accumulating.
    #[test]
    fn small_products_match_gemm() {
        let fill =
            |n: usize, k: f64| -> Vec<f64> { (0..n).map(|i| (i as f64 * k).sin()).collect() };
        // The last but one is a first 3x3 layer's weight gradient (32
        // channels, 28 x 28 positions).
        for (m, n, k, rhs_t) in [
            (5, 40, 9, false),
            (7, 9, 300, true),
            (32, 9, 784, true),
            (3, 20, 1, false),
        ] {
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
}
