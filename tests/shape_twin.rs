//! The macro computes every size itself (`macros/src/shape.rs`, which a
//! proc-macro crate cannot export); the runtime's layers check their const
//! generics with their own `const fn`s. This test includes the macro's file
//! and holds the two against each other over every small geometry, so they
//! cannot drift.

#[path = "../macros/src/shape.rs"]
#[allow(dead_code)]
mod macro_shape;

use flaxen::runtime::layers::{
    conv_out_size, conv_transpose_out_size, conv_transpose_same_padding,
    conv_transpose_valid_padding, dilated_kernel, same_padding,
};

#[test]
fn same_padding_agrees() {
    for size in 1..40 {
        for kernel in 1..9 {
            for stride in 1..5 {
                assert_eq!(
                    macro_shape::same_padding(size, kernel, stride),
                    same_padding(size, kernel, stride),
                    "size {size} kernel {kernel} stride {stride}"
                );
            }
        }
    }
}

#[test]
fn conv_out_size_agrees() {
    for size in 1..30 {
        for kernel in 1..9 {
            for stride in 1..5 {
                for (lo, hi) in [(0, 0), (1, 0), (0, 1), (1, 1), (2, 3), (4, 4)] {
                    // The runtime says 0 where the window does not fit; the
                    // macro reports an error there.
                    assert_eq!(
                        macro_shape::conv_out_size(size, kernel, stride, lo, hi).unwrap_or(0),
                        conv_out_size(size, kernel, stride, lo, hi),
                        "size {size} kernel {kernel} stride {stride} pad ({lo}, {hi})"
                    );
                }
            }
        }
    }
}

#[test]
fn windows_agree_with_the_runtime_geometry_check() {
    use macro_shape::{window, AxisPad};
    for size in 1..20 {
        for kernel in 1..6 {
            for stride in 1..4 {
                for pad in [AxisPad::Same, AxisPad::Valid, AxisPad::Explicit(1, 2)] {
                    let Ok(w) = window(size, kernel, stride, pad) else {
                        continue;
                    };
                    assert_eq!(
                        w.out,
                        conv_out_size(size, kernel, stride, w.pad_lo, w.pad_hi)
                    );
                }
            }
        }
    }
}

#[test]
fn dilated_kernel_agrees() {
    for kernel in 1..9 {
        for dilation in 1..6 {
            assert_eq!(
                macro_shape::dilate(kernel, dilation),
                Some(dilated_kernel(kernel, dilation)),
                "kernel {kernel} dilation {dilation}"
            );
        }
    }
}

#[test]
fn transpose_sizes_agree() {
    use macro_shape::{transpose_padding, transpose_window, AxisPad};
    for kernel in 1..9 {
        for stride in 1..5 {
            let same = transpose_padding(kernel, stride, AxisPad::Same);
            assert_eq!(same, conv_transpose_same_padding(kernel, stride));
            let valid = transpose_padding(kernel, stride, AxisPad::Valid);
            assert_eq!(valid, conv_transpose_valid_padding(kernel, stride));
            for size in 1..20 {
                for pad in [
                    AxisPad::Same,
                    AxisPad::Valid,
                    AxisPad::Explicit(0, 0),
                    AxisPad::Explicit(2, 1),
                ] {
                    let (lo, hi) = transpose_padding(kernel, stride, pad);
                    let runtime = conv_transpose_out_size(size, kernel, stride, lo, hi);
                    let out = transpose_window(size, kernel, stride, pad).map(|w| w.out);
                    // The runtime says 0 where the kernel does not fit; the
                    // macro reports an error there.
                    assert_eq!(
                        out.unwrap_or(0),
                        runtime,
                        "size {size} kernel {kernel} stride {stride} {pad:?}"
                    );
                }
                assert_eq!(
                    transpose_window(size, kernel, stride, AxisPad::Same).map(|w| w.out),
                    Ok(size * stride)
                );
            }
        }
    }
}
