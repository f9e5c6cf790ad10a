//! A bounds-checked front for `gemm::gemm` on row/column-strided slices.

use super::Elem;

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
}
