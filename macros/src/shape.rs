//! Shape arithmetic of the model language: every size the macro computes
//! comes from here.
//!
//! This file is self-contained on purpose: the facade's tests include it
//! with `#[path]` and hold it against the runtime's `const fn`s
//! (`flaxen_runtime::layers::{same_padding, conv_out_size}`), which the
//! layers use to check their const generics. So the macro and the runtime
//! cannot disagree on a size.

/// Padding of one spatial axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisPad {
    /// XLA/Flax `SAME`: output size `ceil(size / stride)`.
    Same,
    /// No padding.
    Valid,
    /// Explicit `(low, high)` padding.
    Explicit(usize, usize),
}

/// A sliding window (convolution or pooling) along one axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Padding before the first element.
    pub pad_lo: usize,
    /// Padding after the last element.
    pub pad_hi: usize,
    /// Output size.
    pub out: usize,
}

/// XLA's `SAME` padding split: total padding so that the output has
/// `ceil(size / stride)` elements, the smaller half before.
pub fn same_padding(size: usize, kernel: usize, stride: usize) -> (usize, usize) {
    let out = size.div_ceil(stride.max(1));
    let needed = out
        .saturating_sub(1)
        .saturating_mul(stride)
        .saturating_add(kernel);
    let total = needed.saturating_sub(size);
    (total / 2, total - total / 2)
}

/// Output size of a window of `kernel` with `stride` over an axis padded by
/// `lo` and `hi`, or `None` when the window does not fit even once (the
/// runtime's `conv_out_size` says 0 there).
pub fn conv_out_size(
    size: usize,
    kernel: usize,
    stride: usize,
    lo: usize,
    hi: usize,
) -> Option<usize> {
    let padded = size.checked_add(lo)?.checked_add(hi)?;
    if padded < kernel || stride == 0 {
        return None;
    }
    Some((padded - kernel) / stride + 1)
}

/// The window arithmetic for one axis; `Err(padded size)` when the window
/// does not fit.
pub fn window(size: usize, kernel: usize, stride: usize, pad: AxisPad) -> Result<Window, usize> {
    let (lo, hi) = match pad {
        AxisPad::Same => same_padding(size, kernel, stride),
        AxisPad::Valid => (0, 0),
        AxisPad::Explicit(lo, hi) => (lo, hi),
    };
    match conv_out_size(size, kernel, stride, lo, hi) {
        Some(out) => Ok(Window {
            pad_lo: lo,
            pad_hi: hi,
            out,
        }),
        None => Err(size.saturating_add(lo).saturating_add(hi)),
    }
}

/// The extent of a kernel of `kernel` cells dilated by `dilation`,
/// `(kernel - 1) * dilation + 1` (the runtime's `dilated_kernel`); `None`
/// on overflow.
pub fn dilate(kernel: usize, dilation: usize) -> Option<usize> {
    kernel.checked_sub(1)?.checked_mul(dilation)?.checked_add(1)
}

/// `jax.lax.conv_transpose`'s padding of the stride-dilated input for a
/// kernel extent `kernel` (the runtime's `conv_transpose_same_padding` and
/// `conv_transpose_valid_padding`); explicit padding is taken as it is.
pub fn transpose_padding(kernel: usize, stride: usize, pad: AxisPad) -> (usize, usize) {
    match pad {
        AxisPad::Same => {
            let total = kernel.saturating_add(stride).saturating_sub(2);
            let lo = if stride.saturating_add(1) > kernel {
                kernel.saturating_sub(1)
            } else {
                total.div_ceil(2)
            };
            (lo, total - lo)
        }
        AxisPad::Valid => (
            kernel.saturating_sub(1),
            stride
                .saturating_sub(1)
                .saturating_add(kernel.saturating_sub(stride)),
        ),
        AxisPad::Explicit(lo, hi) => (lo, hi),
    }
}

/// Output size of a transposed convolution (the runtime's
/// `conv_transpose_out_size`): `(size - 1) * stride + 1 + lo + hi - kernel
/// + 1`, or `None` when that is not at least 1 (or overflows).
pub fn transpose_out_size(
    size: usize,
    kernel: usize,
    stride: usize,
    lo: usize,
    hi: usize,
) -> Option<usize> {
    if size == 0 || stride == 0 {
        return None;
    }
    let padded = (size - 1)
        .checked_mul(stride)?
        .checked_add(1)?
        .checked_add(lo)?
        .checked_add(hi)?;
    padded.checked_sub(kernel)?.checked_add(1)
}

/// The transposed window along one axis: its padding and output size;
/// `Err(padded dilated size)` when the kernel does not fit.
pub fn transpose_window(
    size: usize,
    kernel: usize,
    stride: usize,
    pad: AxisPad,
) -> Result<Window, usize> {
    let (lo, hi) = transpose_padding(kernel, stride, pad);
    match transpose_out_size(size, kernel, stride, lo, hi) {
        Some(out) => Ok(Window {
            pad_lo: lo,
            pad_hi: hi,
            out,
        }),
        None => Err(size
            .saturating_sub(1)
            .saturating_mul(stride)
            .saturating_add(1)
            .saturating_add(lo)
            .saturating_add(hi)),
    }
}

/// The product of sizes, `None` on overflow.
pub fn product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, d| acc.checked_mul(*d))
}

/// The sum of sizes, `None` on overflow.
pub fn sum(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(0usize, |acc, d| acc.checked_add(*d))
}

/// Parameter count of a layer, saturating (a model whose count overflows
/// `usize` cannot be built anyway; the message stays readable).
pub fn params(parts: &[usize]) -> usize {
    parts.iter().fold(1usize, |acc, p| acc.saturating_mul(*p))
}

/// Formats a per-example shape the way messages show it: `[64, 7, 7]`.
pub fn show(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_keeps_size_at_stride_one() {
        for size in 1..20 {
            for k in 1..6 {
                assert_eq!(window(size, k, 1, AxisPad::Same).unwrap().out, size);
            }
        }
    }

    #[test]
    fn same_matches_xla_split() {
        assert_eq!(same_padding(28, 3, 1), (1, 1));
        assert_eq!(same_padding(28, 4, 1), (1, 2));
        assert_eq!(same_padding(28, 2, 2), (0, 0));
        assert_eq!(same_padding(7, 3, 2), (1, 1));
        assert_eq!(same_padding(8, 3, 2), (0, 1));
        assert_eq!(same_padding(1, 5, 1), (2, 2));
        let w = window(7, 3, 2, AxisPad::Same).unwrap();
        assert_eq!((w.pad_lo, w.pad_hi, w.out), (1, 1, 4));
    }

    #[test]
    fn valid_explicit_and_too_large() {
        assert_eq!(window(28, 3, 1, AxisPad::Valid).unwrap().out, 26);
        assert_eq!(window(26, 2, 2, AxisPad::Valid).unwrap().out, 13);
        assert_eq!(window(5, 3, 2, AxisPad::Explicit(1, 1)).unwrap().out, 3);
        assert_eq!(window(3, 5, 1, AxisPad::Valid), Err(3));
        assert_eq!(window(3, 6, 1, AxisPad::Explicit(1, 1)), Err(5));
    }

    #[test]
    fn dilation_and_transpose() {
        assert_eq!(dilate(3, 2), Some(5));
        assert_eq!(dilate(1, 7), Some(1));
        assert_eq!(dilate(usize::MAX, 2), None);
        assert_eq!(transpose_window(4, 3, 2, AxisPad::Same).unwrap().out, 8);
        assert_eq!(transpose_window(4, 3, 2, AxisPad::Valid).unwrap().out, 9);
        assert_eq!(transpose_window(3, 2, 3, AxisPad::Valid).unwrap().out, 9);
        assert_eq!(
            transpose_window(4, 3, 2, AxisPad::Explicit(1, 2))
                .unwrap()
                .out,
            8
        );
        assert_eq!(transpose_window(1, 3, 1, AxisPad::Explicit(0, 1)), Err(2));
        let _ = transpose_window(usize::MAX, usize::MAX, usize::MAX, AxisPad::Same);
        let _ = transpose_window(usize::MAX, 1, usize::MAX, AxisPad::Explicit(usize::MAX, 1));
    }

    #[test]
    fn no_overflow_panics() {
        assert_eq!(conv_out_size(usize::MAX, 3, 1, 1, 1), None);
        assert_eq!(product(&[usize::MAX, 2]), None);
        assert_eq!(sum(&[usize::MAX, 1]), None);
        let _ = same_padding(usize::MAX, 3, 1);
        let _ = same_padding(usize::MAX, usize::MAX, usize::MAX);
        assert_eq!(params(&[usize::MAX, 2]), usize::MAX);
    }
}
