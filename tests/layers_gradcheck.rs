//! Finite-difference checks (f64, central differences) of the gradients of
//! flaxen's conv (with and without bias) and pooling layers on rectangular kernels, stride 2 and
//! explicit, asymmetric padding, of BatchNorm in training mode, and of
//! GroupNorm and RMSNorm. `loss = sum(layer(x) * r)` for a random `r`;
//! tolerance `|analytic - numeric| <= 1e-6 * max(|numeric|, 1)`.

use flaxen::prelude::*;
use flaxen::runtime::layers::{builder, conv_out_size, AvgPool2D, MaxPool2D};

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::{assert_grad, numeric_grad};

// Conv: 2 -> 3 channels, 3x2 kernel, strides (2, 2), padding top 1, bottom 0,
// left 2, right 1, on 7x6 inputs.
const OH: usize = conv_out_size(7, 3, 2, 1, 0);
const OW: usize = conv_out_size(6, 2, 2, 2, 1);
type Conv = builder::Conv2D<2, 3, 3, 2, 2, 2, 1, 0, 2, 1, 7, 6, OH, OW>;
type X = Rank4<2, 2, 7, 6>;
type Y = Rank4<2, 3, OH, OW>;

#[test]
fn conv_gradients_match_finite_differences() {
    let dev: Cpu = Default::default();
    let conv = dev.build_module::<Conv, f64>();
    let mut conv_b = conv.clone();
    conv_b.bias = dev.sample_normal();
    let conv = conv_b;
    let x: Tensor<X, f64, _> = dev.sample_normal();
    let r: Tensor<Y, f64, _> = dev.sample_normal();

    let y = conv.forward(x.leaky_trace());
    let grads = (y * r.clone()).sum().backward();

    let loss = |x: &[f64], w: &[f64], b: &[f64]| {
        let mut m = conv.clone();
        m.weight.copy_from(w);
        m.bias.copy_from(b);
        let x: Tensor<X, f64, _> = dev.tensor_from_vec(x.to_vec(), Default::default());
        (m.forward(x) * r.clone()).sum::<Rank0, _>().array()
    };
    let (xs, ws, bs) = (x.as_vec(), conv.weight.as_vec(), conv.bias.as_vec());
    assert_grad(
        "x",
        &grads.get(&x).as_vec(),
        &numeric_grad(|v| loss(v, &ws, &bs), &xs),
    );
    assert_grad(
        "w",
        &grads.get(&conv.weight).as_vec(),
        &numeric_grad(|v| loss(&xs, v, &bs), &ws),
    );
    assert_grad(
        "b",
        &grads.get(&conv.bias).as_vec(),
        &numeric_grad(|v| loss(&xs, &ws, v), &bs),
    );
}

/// `Conv(use_bias=False)` on the same geometry: the input and weight
/// gradients of the bias-free kernel path.
#[test]
fn unbiased_conv_gradients_match_finite_differences() {
    type Unbiased = builder::UnbiasedConv2D<2, 3, 3, 2, 2, 2, 1, 0, 2, 1, 7, 6, OH, OW>;
    let dev = Cpu::seed_from_u64(4);
    let conv = dev.build_module::<Unbiased, f64>();
    let x: Tensor<X, f64, _> = dev.sample_normal();
    let r: Tensor<Y, f64, _> = dev.sample_normal();
    let grads = (conv.forward(x.leaky_trace()) * r.clone()).sum().backward();
    let loss = |x: &[f64], w: &[f64]| {
        let mut m = conv.clone();
        m.weight.copy_from(w);
        let x: Tensor<X, f64, _> = dev.tensor_from_vec(x.to_vec(), Default::default());
        (m.forward(x) * r.clone()).sum::<Rank0, _>().array()
    };
    let (xs, ws) = (x.as_vec(), conv.weight.as_vec());
    assert_grad(
        "x",
        &grads.get(&x).as_vec(),
        &numeric_grad(|v| loss(v, &ws), &xs),
    );
    assert_grad(
        "w",
        &grads.get(&conv.weight).as_vec(),
        &numeric_grad(|v| loss(&xs, v), &ws),
    );
}

// Pools: 3x2 window, strides (2, 2), padding top 1, bottom 2, left 0, right 1,
// on 2 channels of 6x5.
const POH: usize = conv_out_size(6, 3, 2, 1, 2);
const POW: usize = conv_out_size(5, 2, 2, 0, 1);
type PX = Rank4<2, 2, 6, 5>;
type PY = Rank4<2, 2, POH, POW>;

macro_rules! pool_gradcheck {
    ($name:ident, $pool:ident) => {
        #[test]
        fn $name() {
            let dev: Cpu = Default::default();
            let pool = $pool::<2, 3, 2, 2, 2, 1, 2, 0, 1, 6, 5, POH, POW>;
            let x: Tensor<PX, f64, _> = dev.sample_normal();
            let r: Tensor<PY, f64, _> = dev.sample_normal();
            let y = pool.forward(x.leaky_trace());
            let grads = (y * r.clone()).sum().backward();
            let loss = |v: &[f64]| {
                let x: Tensor<PX, f64, _> = dev.tensor_from_vec(v.to_vec(), Default::default());
                (pool.forward(x) * r.clone()).sum::<Rank0, _>().array()
            };
            assert_grad(
                "x",
                &grads.get(&x).as_vec(),
                &numeric_grad(loss, &x.as_vec()),
            );
        }
    };
}

pool_gradcheck!(avg_pool_gradients_match_finite_differences, AvgPool2D);
pool_gradcheck!(max_pool_gradients_match_finite_differences, MaxPool2D);

/// BatchNorm in training mode: the batch mean and variance are on the tape,
/// so every loss evaluation trains a fresh copy and the statistics move with
/// the perturbed input.
#[test]
fn batch_norm_gradients_match_finite_differences() {
    type X = Rank4<4, 3, 2, 3>;
    let dev = Cpu::seed_from_u64(3);
    let mut bn = dev.build_module::<builder::BatchNorm<3>, f64>();
    bn.scale = dev.sample_normal();
    bn.bias = dev.sample_normal();
    let x: Tensor<X, f64, _> = dev.sample_normal();
    let r: Tensor<X, f64, _> = dev.sample_normal();
    let loss = |xs: &[f64], scale: &[f64], bias: &[f64]| {
        let mut m = bn.clone();
        m.scale.copy_from(scale);
        m.bias.copy_from(bias);
        let x: Tensor<X, f64, _> = dev.tensor_from_vec(xs.to_vec(), Default::default());
        (m.forward_mut(x.leaky_trace()) * r.clone())
            .sum::<Rank0, _>()
            .array()
    };
    let mut m = bn.clone();
    let grads = (m.forward_mut(x.leaky_trace()) * r.clone())
        .sum()
        .backward();
    let (xs, ss, bs) = (x.as_vec(), bn.scale.as_vec(), bn.bias.as_vec());
    assert_grad(
        "x",
        &grads.get(&x).as_vec(),
        &numeric_grad(|v| loss(v, &ss, &bs), &xs),
    );
    assert_grad(
        "scale",
        &grads.get(&m.scale).as_vec(),
        &numeric_grad(|v| loss(&xs, v, &bs), &ss),
    );
    assert_grad(
        "bias",
        &grads.get(&m.bias).as_vec(),
        &numeric_grad(|v| loss(&xs, &ss, v), &bs),
    );
}

/// GroupNorm (2 groups of 2 channels) and RMSNorm on sequences: input and
/// scale gradients; the statistics depend on the input, so every loss
/// evaluation recomputes them.
#[test]
fn group_and_rms_norm_gradients_match_finite_differences() {
    let dev = Cpu::seed_from_u64(8);
    let mut gn = dev.build_module::<builder::GroupNorm<4, 2>, f64>();
    gn.scale = dev.sample_normal();
    gn.bias = dev.sample_normal();
    type Xg = Rank4<2, 4, 3, 2>;
    let x: Tensor<Xg, f64, _> = dev.sample_normal();
    let r: Tensor<Xg, f64, _> = dev.sample_normal();
    let grads = (gn.forward(x.leaky_trace()) * r.clone()).sum().backward();
    let loss = |xs: &[f64], scale: &[f64]| {
        let mut m = gn.clone();
        m.scale.copy_from(scale);
        let x: Tensor<Xg, f64, _> = dev.tensor_from_vec(xs.to_vec(), Default::default());
        (m.forward(x) * r.clone()).sum::<Rank0, _>().array()
    };
    let (xs, ss) = (x.as_vec(), gn.scale.as_vec());
    assert_grad(
        "group norm x",
        &grads.get(&x).as_vec(),
        &numeric_grad(|v| loss(v, &ss), &xs),
    );
    assert_grad(
        "group norm scale",
        &grads.get(&gn.scale).as_vec(),
        &numeric_grad(|v| loss(&xs, v), &ss),
    );

    let mut rms = dev.build_module::<builder::RmsNorm<5>, f64>();
    rms.scale = dev.sample_normal();
    type Xr = Rank3<2, 3, 5>;
    let x: Tensor<Xr, f64, _> = dev.sample_normal();
    let r: Tensor<Xr, f64, _> = dev.sample_normal();
    let grads = (rms.forward(x.leaky_trace()) * r.clone()).sum().backward();
    let loss = |xs: &[f64]| {
        let x: Tensor<Xr, f64, _> = dev.tensor_from_vec(xs.to_vec(), Default::default());
        (rms.forward(x) * r.clone()).sum::<Rank0, _>().array()
    };
    assert_grad(
        "rms norm x",
        &grads.get(&x).as_vec(),
        &numeric_grad(loss, &x.as_vec()),
    );
}
