//! Parity of flaxen's conv and pooling layers with Flax (linen 0.12.8):
//! every case of `tests/fixtures/flax_conv_pool.json`, forward values and
//! the gradients of `loss = sum(y * loss_weights_r)` w.r.t. the input, the
//! kernel and the bias.
//!
//! Tolerance: `|ours - flax| <= 1e-4 * max(|flax|, 1)` per element, computed
//! in f32 (flaxen's CPU kernels, as JAX computes) and in f64.

use flaxen::prelude::*;
use flaxen::runtime::layers::{builder, same_padding, AvgPool2D, MaxPool2D};

#[path = "common/conv_pool.rs"]
mod conv_pool;

use conv_pool::{assert_flax, cast, fixture, ConvCase, PoolCase};

macro_rules! conv_case {
    ($case:expr, $e:ty, $layer:literal,
     [$b:literal, $c:literal, $h:literal, $w:literal] -> [$o:literal, $oh:literal, $ow:literal],
     k = ($kh:literal, $kw:literal), s = ($sh:literal, $sw:literal), pad = $pad:ident) => {{
        let case: &ConvCase = $case;
        assert_eq!(case.layer, $layer);
        assert_eq!(case.x.shape, [$b, $c, $h, $w]);
        assert_eq!(case.y.shape, [$b, $o, $oh, $ow]);
        const PH: (usize, usize) = pad!($pad, $h, $kh, $sh);
        const PW: (usize, usize) = pad!($pad, $w, $kw, $sw);
        type L = builder::Conv2D<
            $c, $o, $kh, $kw, $sh, $sw, { PH.0 }, { PH.1 }, { PW.0 }, { PW.1 }, $h, $w, $oh, $ow,
        >;
        let dev: Cpu = Default::default();
        let mut conv = dev.build_module::<L, $e>();
        conv.weight.copy_from(&cast::<$e>(&case.kernel_oihw));
        conv.bias.copy_from(&cast::<$e>(&case.bias));
        let x: Tensor<Rank4<$b, $c, $h, $w>, $e, _> =
            dev.tensor_from_vec(cast(&case.x), Default::default());
        let r: Tensor<Rank4<$b, $o, $oh, $ow>, $e, _> =
            dev.tensor_from_vec(cast(&case.loss_weights_r), Default::default());
        let y = conv.forward(x.leaky_trace());
        assert_flax(concat!($layer, " y"), &y.as_vec(), &case.y);
        let grads = (y * r).sum().backward();
        assert_flax(concat!($layer, " grad_x"), &grads.get(&x).as_vec(), &case.grad_x);
        assert_flax(
            concat!($layer, " grad_kernel"),
            &grads.get(&conv.weight).as_vec(),
            &case.grad_kernel_oihw,
        );
        assert_flax(concat!($layer, " grad_bias"), &grads.get(&conv.bias).as_vec(), &case.grad_bias);
    }};
}

macro_rules! pad {
    (SAME, $size:literal, $k:literal, $s:literal) => {
        same_padding($size, $k, $s)
    };
    (VALID, $size:literal, $k:literal, $s:literal) => {
        (0, 0)
    };
}

macro_rules! pool_case {
    ($case:expr, $e:ty, $pool:ident, $layer:literal,
     [$b:literal, $c:literal, $h:literal, $w:literal] -> [$oh:literal, $ow:literal],
     k = ($kh:literal, $kw:literal), s = ($sh:literal, $sw:literal), pad = $pad:ident) => {{
        let case: &PoolCase = $case;
        assert_eq!(case.layer, $layer);
        assert_eq!(case.x.shape, [$b, $c, $h, $w]);
        assert_eq!(case.y.shape, [$b, $c, $oh, $ow]);
        const PH: (usize, usize) = pad!($pad, $h, $kh, $sh);
        const PW: (usize, usize) = pad!($pad, $w, $kw, $sw);
        let pool = $pool::<$c, $kh, $kw, $sh, $sw, { PH.0 }, { PH.1 }, { PW.0 }, { PW.1 }, $h, $w, $oh, $ow>;
        let dev: Cpu = Default::default();
        let x: Tensor<Rank4<$b, $c, $h, $w>, $e, _> =
            dev.tensor_from_vec(cast(&case.x), Default::default());
        let r: Tensor<Rank4<$b, $c, $oh, $ow>, $e, _> =
            dev.tensor_from_vec(cast(&case.loss_weights_r), Default::default());
        let y = pool.forward(x.leaky_trace());
        assert_flax(concat!($layer, " y"), &y.as_vec(), &case.y);
        let grads = (y * r).sum().backward();
        assert_flax(concat!($layer, " grad_x"), &grads.get(&x).as_vec(), &case.grad_x);
    }};
}

macro_rules! all_conv_cases {
    ($e:ty) => {{
        let f = fixture();
        assert_eq!(f.conv.len(), 6, "a new conv case needs a line here");
        conv_case!(&f.conv[0], $e,
            "Conv(features=4, kernel_size=(3, 3), strides=(1, 1), padding='SAME')",
            [2, 3, 7, 6] -> [4, 7, 6], k = (3, 3), s = (1, 1), pad = SAME);
        conv_case!(&f.conv[1], $e,
            "Conv(features=4, kernel_size=(3, 3), strides=(1, 1), padding='VALID')",
            [2, 3, 7, 6] -> [4, 5, 4], k = (3, 3), s = (1, 1), pad = VALID);
        conv_case!(&f.conv[2], $e,
            "Conv(features=5, kernel_size=(3, 3), strides=(2, 2), padding='SAME')",
            [2, 3, 8, 9] -> [5, 4, 5], k = (3, 3), s = (2, 2), pad = SAME);
        conv_case!(&f.conv[3], $e,
            "Conv(features=3, kernel_size=(5, 5), strides=(2, 2), padding='VALID')",
            [1, 2, 9, 9] -> [3, 3, 3], k = (5, 5), s = (2, 2), pad = VALID);
        conv_case!(&f.conv[4], $e,
            "Conv(features=2, kernel_size=(2, 3), strides=(1, 2), padding='SAME')",
            [2, 1, 6, 5] -> [2, 6, 3], k = (2, 3), s = (1, 2), pad = SAME);
        conv_case!(&f.conv[5], $e,
            "Conv(features=3, kernel_size=(1, 1), strides=(1, 1), padding='SAME')",
            [2, 4, 5, 5] -> [3, 5, 5], k = (1, 1), s = (1, 1), pad = SAME);
    }};
}

macro_rules! all_pool_cases {
    ($e:ty) => {{
        let f = fixture();
        assert_eq!(f.pool.len(), 5, "a new pool case needs a line here");
        pool_case!(&f.pool[0], $e, AvgPool2D,
            "avg_pool(window_shape=(2, 2), strides=(2, 2), padding='VALID')",
            [2, 3, 6, 6] -> [3, 3], k = (2, 2), s = (2, 2), pad = VALID);
        pool_case!(&f.pool[1], $e, MaxPool2D,
            "max_pool(window_shape=(2, 2), strides=(2, 2), padding='VALID')",
            [2, 3, 6, 6] -> [3, 3], k = (2, 2), s = (2, 2), pad = VALID);
        pool_case!(&f.pool[2], $e, AvgPool2D,
            "avg_pool(window_shape=(3, 3), strides=(2, 2), padding='VALID')",
            [2, 2, 7, 7] -> [3, 3], k = (3, 3), s = (2, 2), pad = VALID);
        pool_case!(&f.pool[3], $e, MaxPool2D,
            "max_pool(window_shape=(3, 3), strides=(1, 1), padding='SAME')",
            [2, 2, 7, 5] -> [7, 5], k = (3, 3), s = (1, 1), pad = SAME);
        pool_case!(&f.pool[4], $e, AvgPool2D,
            "avg_pool(window_shape=(2, 2), strides=(1, 1), padding='VALID')",
            [1, 2, 5, 5] -> [4, 4], k = (2, 2), s = (1, 1), pad = VALID);
    }};
}

#[test]
fn conv_matches_flax_f32() {
    all_conv_cases!(f32);
}

#[test]
fn conv_matches_flax_f64() {
    all_conv_cases!(f64);
}

#[test]
fn pool_matches_flax_f32() {
    all_pool_cases!(f32);
}

#[test]
fn pool_matches_flax_f64() {
    all_pool_cases!(f64);
}
