//! `tests/fixtures/flax_conv_pool.json` (Flax linen Conv / avg_pool /
//! max_pool forward values and gradients), shared by `tests/layers_fixtures.rs`
//! (Cpu) and `tests/cuda_layers.rs` (Cuda): include with
//! `#[path = "common/conv_pool.rs"] mod conv_pool;`.
#![allow(dead_code)]

use flaxen::prelude::*;
use serde::Deserialize;

pub use crate::fixture::{cast, Arr};

#[derive(Deserialize)]
pub struct ConvCase {
    pub layer: String,
    pub x: Arr,
    pub kernel_oihw: Arr,
    pub bias: Arr,
    pub y: Arr,
    pub loss_weights_r: Arr,
    pub grad_x: Arr,
    pub grad_kernel_oihw: Arr,
    pub grad_bias: Arr,
}

#[derive(Deserialize)]
pub struct PoolCase {
    pub layer: String,
    pub x: Arr,
    pub y: Arr,
    pub loss_weights_r: Arr,
    pub grad_x: Arr,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub conv: Vec<ConvCase>,
    pub pool: Vec<PoolCase>,
}

pub fn fixture() -> Fixture {
    let text = include_str!("../fixtures/flax_conv_pool.json");
    serde_json::from_str(text).expect("fixture parses")
}

/// `|got - flax| <= 1e-4 * max(|flax|, 1)` for every element, in every
/// dtype: these cases are the coarser conv and pool checks.
pub fn assert_flax<E: Dtype>(what: &str, got: &[E], want: &Arr) {
    crate::fixture::assert_within(what, got, want, 1e-4);
}

// ------------------------------------------------ the fixture's cases

// Every case of the fixture as a concrete layer type, on any device: each
// case needs its own const-generic geometry, hence macros. Call
// `all_conv_cases!(&dev, f32)` / `all_pool_cases!(&dev, f64)` from a test
// crate that includes this file as `mod conv_pool`.

macro_rules! pad {
    (SAME, $size:literal, $k:literal, $s:literal) => {
        flaxen::runtime::layers::same_padding($size, $k, $s)
    };
    (VALID, $size:literal, $k:literal, $s:literal) => {
        (0, 0)
    };
}

macro_rules! conv_case {
    ($dev:expr, $case:expr, $e:ty, $layer:literal,
     [$b:literal, $c:literal, $h:literal, $w:literal] -> [$o:literal, $oh:literal, $ow:literal],
     k = ($kh:literal, $kw:literal), s = ($sh:literal, $sw:literal), pad = $pad:ident) => {{
        let dev = $dev;
        let case: &$crate::conv_pool::ConvCase = $case;
        assert_eq!(case.layer, $layer);
        assert_eq!(case.x.shape, [$b, $c, $h, $w]);
        assert_eq!(case.y.shape, [$b, $o, $oh, $ow]);
        const PH: (usize, usize) = $crate::conv_pool::pad!($pad, $h, $kh, $sh);
        const PW: (usize, usize) = $crate::conv_pool::pad!($pad, $w, $kw, $sw);
        type L = flaxen::runtime::layers::builder::Conv2D<
            $c, $o, $kh, $kw, $sh, $sw, { PH.0 }, { PH.1 }, { PW.0 }, { PW.1 }, $h, $w, $oh, $ow,
        >;
        let mut conv = dev.build_module::<L, $e>();
        conv.weight.copy_from(&$crate::conv_pool::cast::<$e>(&case.kernel_oihw));
        conv.bias.copy_from(&$crate::conv_pool::cast::<$e>(&case.bias));
        let x: Tensor<Rank4<$b, $c, $h, $w>, $e, _> =
            dev.tensor_from_vec($crate::conv_pool::cast(&case.x), Default::default());
        let r: Tensor<Rank4<$b, $o, $oh, $ow>, $e, _> =
            dev.tensor_from_vec($crate::conv_pool::cast(&case.loss_weights_r), Default::default());
        let y = conv.forward(x.leaky_trace());
        $crate::conv_pool::assert_flax(concat!($layer, " y"), &y.as_vec(), &case.y);
        let grads = (y * r).sum().backward();
        $crate::conv_pool::assert_flax(concat!($layer, " grad_x"), &grads.get(&x).as_vec(), &case.grad_x);
        $crate::conv_pool::assert_flax(
            concat!($layer, " grad_kernel"),
            &grads.get(&conv.weight).as_vec(),
            &case.grad_kernel_oihw,
        );
        $crate::conv_pool::assert_flax(concat!($layer, " grad_bias"), &grads.get(&conv.bias).as_vec(), &case.grad_bias);
    }};
}

macro_rules! pool_case {
    ($dev:expr, $case:expr, $e:ty, $pool:ident, $layer:literal,
     [$b:literal, $c:literal, $h:literal, $w:literal] -> [$oh:literal, $ow:literal],
     k = ($kh:literal, $kw:literal), s = ($sh:literal, $sw:literal), pad = $pad:ident) => {{
        let dev = $dev;
        let case: &$crate::conv_pool::PoolCase = $case;
        assert_eq!(case.layer, $layer);
        assert_eq!(case.x.shape, [$b, $c, $h, $w]);
        assert_eq!(case.y.shape, [$b, $c, $oh, $ow]);
        const PH: (usize, usize) = $crate::conv_pool::pad!($pad, $h, $kh, $sh);
        const PW: (usize, usize) = $crate::conv_pool::pad!($pad, $w, $kw, $sw);
        let pool = flaxen::runtime::layers::$pool::<$c, $kh, $kw, $sh, $sw, { PH.0 }, { PH.1 }, { PW.0 }, { PW.1 }, $h, $w, $oh, $ow>;
        let x: Tensor<Rank4<$b, $c, $h, $w>, $e, _> =
            dev.tensor_from_vec($crate::conv_pool::cast(&case.x), Default::default());
        let r: Tensor<Rank4<$b, $c, $oh, $ow>, $e, _> =
            dev.tensor_from_vec($crate::conv_pool::cast(&case.loss_weights_r), Default::default());
        let y = pool.forward(x.leaky_trace());
        $crate::conv_pool::assert_flax(concat!($layer, " y"), &y.as_vec(), &case.y);
        let grads = (y * r).sum().backward();
        $crate::conv_pool::assert_flax(concat!($layer, " grad_x"), &grads.get(&x).as_vec(), &case.grad_x);
    }};
}

macro_rules! all_conv_cases {
    ($dev:expr, $e:ty) => {{
        let f = $crate::conv_pool::fixture();
        assert_eq!(f.conv.len(), 6, "a new conv case needs a line here");
        $crate::conv_pool::conv_case!($dev, &f.conv[0], $e,
            "Conv(features=4, kernel_size=(3, 3), strides=(1, 1), padding='SAME')",
            [2, 3, 7, 6] -> [4, 7, 6], k = (3, 3), s = (1, 1), pad = SAME);
        $crate::conv_pool::conv_case!($dev, &f.conv[1], $e,
            "Conv(features=4, kernel_size=(3, 3), strides=(1, 1), padding='VALID')",
            [2, 3, 7, 6] -> [4, 5, 4], k = (3, 3), s = (1, 1), pad = VALID);
        $crate::conv_pool::conv_case!($dev, &f.conv[2], $e,
            "Conv(features=5, kernel_size=(3, 3), strides=(2, 2), padding='SAME')",
            [2, 3, 8, 9] -> [5, 4, 5], k = (3, 3), s = (2, 2), pad = SAME);
        $crate::conv_pool::conv_case!($dev, &f.conv[3], $e,
            "Conv(features=3, kernel_size=(5, 5), strides=(2, 2), padding='VALID')",
            [1, 2, 9, 9] -> [3, 3, 3], k = (5, 5), s = (2, 2), pad = VALID);
        $crate::conv_pool::conv_case!($dev, &f.conv[4], $e,
            "Conv(features=2, kernel_size=(2, 3), strides=(1, 2), padding='SAME')",
            [2, 1, 6, 5] -> [2, 6, 3], k = (2, 3), s = (1, 2), pad = SAME);
        $crate::conv_pool::conv_case!($dev, &f.conv[5], $e,
            "Conv(features=3, kernel_size=(1, 1), strides=(1, 1), padding='SAME')",
            [2, 4, 5, 5] -> [3, 5, 5], k = (1, 1), s = (1, 1), pad = SAME);
    }};
}

macro_rules! all_pool_cases {
    ($dev:expr, $e:ty) => {{
        let f = $crate::conv_pool::fixture();
        assert_eq!(f.pool.len(), 5, "a new pool case needs a line here");
        $crate::conv_pool::pool_case!($dev, &f.pool[0], $e, AvgPool2D,
            "avg_pool(window_shape=(2, 2), strides=(2, 2), padding='VALID')",
            [2, 3, 6, 6] -> [3, 3], k = (2, 2), s = (2, 2), pad = VALID);
        $crate::conv_pool::pool_case!($dev, &f.pool[1], $e, MaxPool2D,
            "max_pool(window_shape=(2, 2), strides=(2, 2), padding='VALID')",
            [2, 3, 6, 6] -> [3, 3], k = (2, 2), s = (2, 2), pad = VALID);
        $crate::conv_pool::pool_case!($dev, &f.pool[2], $e, AvgPool2D,
            "avg_pool(window_shape=(3, 3), strides=(2, 2), padding='VALID')",
            [2, 2, 7, 7] -> [3, 3], k = (3, 3), s = (2, 2), pad = VALID);
        $crate::conv_pool::pool_case!($dev, &f.pool[3], $e, MaxPool2D,
            "max_pool(window_shape=(3, 3), strides=(1, 1), padding='SAME')",
            [2, 2, 7, 5] -> [7, 5], k = (3, 3), s = (1, 1), pad = SAME);
        $crate::conv_pool::pool_case!($dev, &f.pool[4], $e, AvgPool2D,
            "avg_pool(window_shape=(2, 2), strides=(1, 1), padding='VALID')",
            [1, 2, 5, 5] -> [4, 4], k = (2, 2), s = (1, 1), pad = VALID);
    }};
}

pub(crate) use {all_conv_cases, all_pool_cases, conv_case, pad, pool_case};
