//! The random-input layer geometries that two comparisons share:
//! `tests/layers_composite.rs` (flaxen's CPU kernels against the composite
//! path) and `tests/cuda_layers.rs` (Cuda against Cpu). Include with
//! `#[path = "common/geometries.rs"] #[macro_use] mod geometries;` before
//! the macros that use it.
//!
//! `conv_geometries!(check)` calls `check!(name, c = .., o = .., k = (kh, kw),
//! s = (sh, sw), pad = (top, bottom, left, right), hw = (h, w))` once per
//! geometry; `pool_geometries!(check)` calls `check!(name, Pool, c = .., k =
//! .., s = .., pad = .., hw = ..)` with `Pool` the layer type's name.
//! Tokens after the macro's name (`conv_geometries!(check, f32)`) are passed
//! on after the test name.

macro_rules! conv_geometries {
    ($check:ident $(, $extra:tt)*) => {
        $check!(
            conv_same_3x3 $(, $extra)*,
            c = 3, o = 4, k = (3, 3), s = (1, 1),
            pad = (
                flaxen::runtime::layers::same_padding(9, 3, 1).0,
                flaxen::runtime::layers::same_padding(9, 3, 1).1,
                flaxen::runtime::layers::same_padding(8, 3, 1).0,
                flaxen::runtime::layers::same_padding(8, 3, 1).1
            ),
            hw = (9, 8)
        );
        $check!(
            conv_rect_strided_asymmetric $(, $extra)*,
            c = 2, o = 3, k = (3, 2), s = (2, 3), pad = (2, 0, 1, 2), hw = (7, 8)
        );
        $check!(
            conv_valid_3x3_wide_rows $(, $extra)*,
            c = 2, o = 3, k = (3, 3), s = (1, 1), pad = (0, 0, 0, 0), hw = (6, 11)
        );
        $check!(
            conv_pointwise $(, $extra)*,
            c = 4, o = 2, k = (1, 1), s = (1, 1), pad = (0, 0, 0, 0), hw = (5, 6)
        );
        $check!(
            conv_valid_5x5_stride2 $(, $extra)*,
            c = 2, o = 3, k = (5, 5), s = (2, 2), pad = (0, 0, 0, 0), hw = (9, 10)
        );
    };
}

macro_rules! pool_geometries {
    ($check:ident $(, $extra:tt)*) => {
        $check!(
            avg_pool_2x2 $(, $extra)*, AvgPool2D,
            c = 3, k = (2, 2), s = (2, 2), pad = (0, 0, 0, 0), hw = (6, 7)
        );
        $check!(
            avg_pool_padded_rect $(, $extra)*, AvgPool2D,
            c = 2, k = (3, 2), s = (2, 1), pad = (1, 2, 0, 1), hw = (7, 5)
        );
        $check!(
            max_pool_2x2 $(, $extra)*, MaxPool2D,
            c = 3, k = (2, 2), s = (2, 2), pad = (0, 0, 0, 0), hw = (6, 7)
        );
        $check!(
            max_pool_padded_rect $(, $extra)*, MaxPool2D,
            c = 2, k = (3, 2), s = (2, 1), pad = (1, 2, 0, 1), hw = (7, 5)
        );
    };
}
