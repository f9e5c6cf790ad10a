//! Grouped, depthwise and dilated convolutions (`ConvGeneral2D`, Flax's
//! `Conv(feature_group_count, kernel_dilation)`) and transposed ones
//! (`ConvTranspose2D`, Flax's `ConvTranspose`) on the Cpu:
//!
//! 1. Flax parity on `tests/fixtures/flax_conv_ext.json` (made by
//!    `tests/python/make_flax_conv_ext.py`): values and the gradients of
//!    `loss = sum(y * r)` w.r.t. input, weight and bias, in f64 (within
//!    1e-9) and f32 (within 1e-4), relative to `max(|flax|, 1)`.
//! 2. The padding and size rules against the fixture's geometries.
//! 3. Finite differences (f64, central): `|analytic - numeric| <= 1e-6 *
//!    max(|numeric|, 1)`.
//! 4. Flax's default initialisers: the fixture's `var * fan_in` of Flax's
//!    kernel and flaxen's, with the fan-in flaxen uses.

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/conv_ext.rs"]
#[macro_use]
mod conv_ext;

#[path = "common/gradcheck.rs"]
mod gradcheck;

use flaxen::prelude::*;
use flaxen::runtime::layers::{
    builder, conv_transpose_out_size, conv_transpose_same_padding, conv_transpose_valid_padding,
    dilated_kernel, same_padding, NoInputGrad,
};
use gradcheck::{assert_grad, numeric_grad};

#[test]
fn grouped_and_dilated_conv_match_flax_f64() {
    all_grouped_dilated_cases!(&Cpu::default(), f64);
}

#[test]
fn grouped_and_dilated_conv_match_flax_f32() {
    all_grouped_dilated_cases!(&Cpu::default(), f32);
}

#[test]
fn conv_transpose_matches_flax_f64() {
    all_transpose_cases!(&Cpu::default(), f64);
}

#[test]
fn conv_transpose_matches_flax_f32() {
    all_transpose_cases!(&Cpu::default(), f32);
}

/// The generics the fixture's cases are written with, from the rules.
#[test]
fn size_rules_give_the_fixture_geometries() {
    // Conv, dilated (2, 1), SAME on 6x5: the 5x3 extent pads (2, 2), (1, 1).
    assert_eq!(same_padding(6, dilated_kernel(3, 2), 1), (2, 2));
    assert_eq!(same_padding(5, dilated_kernel(3, 1), 1), (1, 1));
    // ConvTranspose SAME, stride 2, 3x3 on 4x5: (2, 1), 8x10.
    let (lo, hi) = conv_transpose_same_padding(3, 2);
    assert_eq!((lo, hi), (2, 1));
    assert_eq!(conv_transpose_out_size(4, 3, 2, lo, hi), 8);
    assert_eq!(conv_transpose_out_size(5, 3, 2, lo, hi), 10);
    // VALID: (k - 1, s - 1 + max(k - s, 0)).
    assert_eq!(conv_transpose_valid_padding(3, 2), (2, 2));
    assert_eq!(conv_transpose_valid_padding(2, 2), (1, 1));
    assert_eq!(conv_transpose_valid_padding(2, 3), (1, 2));
    assert_eq!(conv_transpose_out_size(3, 2, 3, 1, 2), 9);
    // Explicit padding is the transposed convolution's own.
    assert_eq!(conv_transpose_out_size(4, 3, 2, 1, 2), 8);
    // Dilated 2x2 by 2 spans 3: SAME pads (2, 1).
    assert_eq!(conv_transpose_same_padding(dilated_kernel(2, 2), 2), (2, 1));
}

/// `loss = sum(layer(x) * r)` against finite differences in `x`, `weight`
/// and `bias`, for a layer type with those two fields.
macro_rules! gradcheck {
    ($layer:ty, $x:ty, $y:ty) => {{
        let dev = Cpu::seed_from_u64(17);
        let mut layer = dev.build_module::<$layer, f64>();
        layer.bias = dev.sample_normal();
        let x: Tensor<$x, f64, _> = dev.sample_normal();
        let r: Tensor<$y, f64, _> = dev.sample_normal();
        let grads = (layer.forward(x.leaky_trace()) * r.clone())
            .sum()
            .backward();
        let loss = |x: &[f64], w: &[f64], b: &[f64]| {
            let mut m = layer.clone();
            m.weight.copy_from(w);
            m.bias.copy_from(b);
            let x: Tensor<$x, f64, _> = dev.tensor_from_vec(x.to_vec(), Default::default());
            (m.forward(x) * r.clone()).sum::<Rank0, _>().array()
        };
        let (xs, ws, bs) = (x.as_vec(), layer.weight.as_vec(), layer.bias.as_vec());
        let gx = numeric_grad(|v| loss(v, &ws, &bs), &xs);
        assert_grad("x", &grads.get(&x).as_vec(), &gx);
        let gw = numeric_grad(|v| loss(&xs, v, &bs), &ws);
        assert_grad("w", &grads.get(&layer.weight).as_vec(), &gw);
        let gb = numeric_grad(|v| loss(&xs, &ws, v), &bs);
        assert_grad("b", &grads.get(&layer.bias).as_vec(), &gb);
    }};
}

#[test]
fn grouped_dilated_conv_gradients_match_finite_differences() {
    // 4 -> 6 channels in 2 groups, 3x2 kernel dilated (2, 1), strides (1,
    // 2), padding (2, 1, 0, 1) on 7x6: OH = (7 + 3 - 5) + 1 = 6, OW = 3.
    type L = builder::ConvGeneral2D<4, 2, 6, 3, 2, 2, 1, 1, 2, 2, 1, 0, 1, 7, 6, 6, 3>;
    gradcheck!(L, Rank4<2, 4, 7, 6>, Rank4<2, 6, 6, 3>);
}

#[test]
fn conv_transpose_gradients_match_finite_differences() {
    // 2 -> 3 channels, 3x2 kernel, strides (2, 3), padding (1, 2, 3, 0) on
    // 3x3: OH = 5 + 3 - 3 + 1 = 6, OW = 7 + 3 - 2 + 1 = 9.
    type L = builder::ConvTranspose2D<2, 3, 3, 2, 1, 1, 2, 3, 1, 2, 3, 0, 3, 3, 6, 9>;
    gradcheck!(L, Rank4<2, 2, 3, 3>, Rank4<2, 3, 6, 9>);
}

/// Through `NoInputGrad` a grouped conv records the same weight gradient
/// and none for its input.
#[test]
fn grouped_conv_accepts_no_input_grad() {
    type L = builder::UnbiasedConvGeneral2D<4, 1, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, 5, 5, 5>;
    let dev = Cpu::seed_from_u64(2);
    let conv = dev.build_module::<L, f64>();
    let x: Tensor<Rank4<3, 4, 5, 5>, f64, _> = dev.sample_normal();
    let dw0 = conv
        .forward(x.leaky_trace())
        .sum()
        .backward()
        .get(&conv.weight)
        .as_vec();
    let grads = conv.forward(NoInputGrad(x.leaky_trace())).sum().backward();
    assert_eq!(grads.get(&conv.weight).as_vec(), dw0);
}

fn var_times(w: &[f64], fan_in: f64) -> f64 {
    let mean = w.iter().sum::<f64>() / w.len() as f64;
    w.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / w.len() as f64 * fan_in
}

/// The fixture's `init` is Flax's kernel variance times the fan-in flaxen
/// uses; both are 1 when the initialisers agree.
#[test]
fn default_init_is_flax_lecun_normal() {
    let fx = conv_ext::fixture();
    for (what, v) in &fx.init {
        assert!((v - 1.0).abs() < 0.05, "flax {what}: var * fan_in = {v}");
    }
    let dev = Cpu::seed_from_u64(8);
    // Conv(256, (3, 3), feature_group_count=4) on 16 channels: fan_in 4 * 9.
    type G = builder::ConvGeneral2D<16, 4, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8>;
    let g = dev.build_module::<G, f64>();
    let v = var_times(&g.weight.as_vec(), 36.0);
    assert!((v - 1.0).abs() < 0.05, "grouped: {v}");
    assert!(g.bias.as_vec().iter().all(|&b| b == 0.0));
    // ConvTranspose(256, (3, 3)) on 16 channels: fan_in 16 * 9.
    type T = builder::ConvTranspose2D<16, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8>;
    let t = dev.build_module::<T, f64>();
    let v = var_times(&t.weight.as_vec(), 144.0);
    assert!((v - 1.0).abs() < 0.05, "transpose: {v}");
    assert!(t.bias.as_vec().iter().all(|&b| b == 0.0));
}
