//! `tests/fixtures/flax_conv_ext.json` (Flax linen `Conv` with
//! `feature_group_count` / `kernel_dilation`, and `ConvTranspose`: values
//! and gradients), shared by `tests/layers_conv_ext.rs` (Cpu) and
//! `tests/cuda_layers.rs` (Cuda): include with
//! `#[path = "common/conv_ext.rs"] #[macro_use] mod conv_ext;`.
//!
//! Tolerance: `|got - flax| <= tol * max(|flax|, 1)` per element, `tol` =
//! 1e-9 in f64 and 1e-4 in f32.
#![allow(dead_code, unused_macros)]

use serde::Deserialize;

pub use crate::fixture::{assert_flax, cast, Arr};
use std::collections::BTreeMap;

#[derive(Deserialize)]
pub struct Case {
    pub name: String,
    pub flax_param_shapes: BTreeMap<String, Vec<usize>>,
    pub x: Arr,
    pub weight: Arr,
    pub bias: Option<Arr>,
    pub y: Arr,
    pub r: Arr,
    pub grad_x: Arr,
    pub grad_weight: Arr,
    pub grad_bias: Option<Arr>,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub conv: Vec<Case>,
    pub transpose: Vec<Case>,
    pub init: BTreeMap<String, f64>,
}

pub fn fixture() -> Fixture {
    let text = include_str!("../fixtures/flax_conv_ext.json");
    serde_json::from_str(text).expect("fixture parses")
}

/// Flax's `kernel` (HWIO) is flaxen's `weight` (OIHW), and `bias` is `bias`.
pub fn check_names(case: &Case) {
    let k = &case.flax_param_shapes["kernel"];
    assert_eq!(case.weight.shape, [k[3], k[2], k[0], k[1]], "{}", case.name);
    assert_eq!(
        case.flax_param_shapes.contains_key("bias"),
        case.bias.is_some(),
        "{}",
        case.name
    );
}

/// One case: `$layer` (a builder type) on `[$b, $c, $h, $w]` inputs, with
/// or without bias.
macro_rules! ext_case {
    ($dev:expr, $case:expr, $e:ty, $layer:ty, bias = $bias:tt,
     [$b:literal, $c:literal, $h:literal, $w:literal] -> [$o:literal, $oh:literal, $ow:literal]) => {{
        let dev = $dev;
        let case: &$crate::conv_ext::Case = $case;
        $crate::conv_ext::check_names(case);
        assert_eq!(case.x.shape, [$b, $c, $h, $w], "{}", case.name);
        assert_eq!(case.y.shape, [$b, $o, $oh, $ow], "{}", case.name);
        let mut layer = dev.build_module::<$layer, $e>();
        layer.weight.copy_from(&$crate::conv_ext::cast::<$e>(&case.weight));
        ext_case!(@set_bias $bias, layer, case, $e);
        let x: Tensor<Rank4<$b, $c, $h, $w>, $e, _> =
            dev.tensor_from_vec($crate::conv_ext::cast(&case.x), Default::default());
        let r: Tensor<Rank4<$b, $o, $oh, $ow>, $e, _> =
            dev.tensor_from_vec($crate::conv_ext::cast(&case.r), Default::default());
        let y = layer.forward(x.leaky_trace());
        let name = &case.name;
        $crate::conv_ext::assert_flax(&format!("{name} y"), &y.as_vec(), &case.y);
        let grads = (y * r).sum().backward();
        $crate::conv_ext::assert_flax(&format!("{name} grad_x"), &grads.get(&x).as_vec(), &case.grad_x);
        $crate::conv_ext::assert_flax(
            &format!("{name} grad_weight"),
            &grads.get(&layer.weight).as_vec(),
            &case.grad_weight,
        );
        ext_case!(@check_bias $bias, layer, case, grads);
    }};
    (@set_bias true, $layer:ident, $case:ident, $e:ty) => {
        $layer.bias.copy_from(&$crate::conv_ext::cast::<$e>($case.bias.as_ref().expect("bias")));
    };
    (@set_bias false, $layer:ident, $case:ident, $e:ty) => {
        assert!($case.bias.is_none());
    };
    (@check_bias true, $layer:ident, $case:ident, $grads:ident) => {
        $crate::conv_ext::assert_flax(
            &format!("{} grad_bias", $case.name),
            &$grads.get(&$layer.bias).as_vec(),
            $case.grad_bias.as_ref().expect("grad_bias"),
        );
    };
    (@check_bias false, $layer:ident, $case:ident, $grads:ident) => {};
}

/// Every `Conv` case of the fixture on `$dev` in `$e`.
macro_rules! all_grouped_dilated_cases {
    ($dev:expr, $e:ty) => {{
        use flaxen::runtime::layers::builder::{ConvGeneral2D, UnbiasedConvGeneral2D};
        let fx = $crate::conv_ext::fixture();
        let c = &fx.conv;
        assert_eq!(c.len(), 4);
        // C, I, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW
        ext_case!($dev, &c[0], $e,
            ConvGeneral2D<4, 2, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, 6, 5, 6>,
            bias = true, [2, 4, 5, 6] -> [6, 5, 6]);
        ext_case!($dev, &c[1], $e,
            UnbiasedConvGeneral2D<3, 1, 6, 3, 2, 1, 1, 2, 1, 0, 0, 0, 0, 7, 5, 3, 4>,
            bias = false, [2, 3, 7, 5] -> [6, 3, 4]);
        ext_case!($dev, &c[2], $e,
            ConvGeneral2D<2, 2, 3, 3, 3, 2, 1, 1, 1, 2, 2, 1, 1, 6, 5, 6, 5>,
            bias = true, [2, 2, 6, 5] -> [3, 6, 5]);
        ext_case!($dev, &c[3], $e,
            ConvGeneral2D<4, 1, 4, 3, 3, 2, 2, 2, 2, 2, 1, 0, 2, 8, 7, 4, 3>,
            bias = true, [2, 4, 8, 7] -> [4, 4, 3]);
    }};
}

/// Every `ConvTranspose` case of the fixture on `$dev` in `$e`.
macro_rules! all_transpose_cases {
    ($dev:expr, $e:ty) => {{
        use flaxen::runtime::layers::builder::{ConvTranspose2D, UnbiasedConvTranspose2D};
        let fx = $crate::conv_ext::fixture();
        let t = &fx.transpose;
        assert_eq!(t.len(), 5);
        // C, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW
        ext_case!($dev, &t[0], $e,
            ConvTranspose2D<3, 2, 3, 3, 1, 1, 2, 2, 2, 1, 2, 1, 4, 5, 8, 10>,
            bias = true, [2, 3, 4, 5] -> [2, 8, 10]);
        ext_case!($dev, &t[1], $e,
            ConvTranspose2D<2, 3, 3, 2, 1, 1, 2, 2, 2, 2, 1, 1, 3, 4, 7, 8>,
            bias = true, [2, 2, 3, 4] -> [3, 7, 8]);
        ext_case!($dev, &t[2], $e,
            UnbiasedConvTranspose2D<2, 2, 2, 2, 1, 1, 3, 3, 1, 2, 1, 2, 3, 3, 9, 9>,
            bias = false, [2, 2, 3, 3] -> [2, 9, 9]);
        ext_case!($dev, &t[3], $e,
            ConvTranspose2D<2, 3, 3, 2, 1, 1, 2, 1, 1, 2, 0, 1, 4, 3, 8, 3>,
            bias = true, [2, 2, 4, 3] -> [3, 8, 3]);
        ext_case!($dev, &t[4], $e,
            ConvTranspose2D<2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 2, 1, 3, 3, 6, 6>,
            bias = true, [2, 2, 3, 3] -> [2, 6, 6]);
    }};
}
