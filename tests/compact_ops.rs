//! `#[compact]`'s reductions: `mean` / `sum` over per-example axes (counted
//! from the end, as Flax code writes `axis=-1`), against the same dfdx ops
//! written by hand: values and gradients, `Const` and `usize` batch.

use flaxen::dfdx::shapes::Axes2;
use flaxen::prelude::*;

/// Global average pooling, ResNet-style: conv, mean over height and width.
pub struct Gap;

#[compact]
impl Gap {
    fn forward(x: Input<3, 8, 8>) {
        let x = relu(Conv(4, (3, 3))(x));
        let x = mean(x, axis = (-2, -1));
        Dense(2)(x)
    }
}

/// A sum over the sequence axis and a mean over one image axis.
pub struct Pools;

#[compact]
impl Pools {
    fn forward(x: Input<5, 6>) {
        let s = sum(x, axis = -2);
        let m = mean(x, -1);
        Dense(3)(s) + Dense(3)(m)
    }
}

#[test]
fn global_average_pooling_matches_dfdx() {
    let dev = Cpu::seed_from_u64(1);
    let m = dev.build_module::<Gap, f64>();
    let x: Tensor<Rank4<2, 3, 8, 8>, f64, _> = dev.sample_normal();
    let y = m.forward(x.leaky_trace());
    let h = m.conv_0.forward(x.leaky_trace()).relu();
    let want = m.dense_0.forward(h.mean::<Rank2<2, 4>, Axes2<2, 3>>());
    assert_eq!(y.as_vec(), want.as_vec());
    let g = y.sum().backward();
    let gw = want.sum().backward();
    assert_eq!(g.get(&x).as_vec(), gw.get(&x).as_vec());
    assert_eq!(
        g.get(&m.conv_0.weight).as_vec(),
        gw.get(&m.conv_0.weight).as_vec()
    );

    let xu: Tensor<(usize, Const<3>, Const<8>, Const<8>), f64, _> =
        dev.sample_normal_like(&(5, Const, Const, Const));
    let y: Tensor<(usize, Const<2>), f64, _> = m.forward(xu);
    assert_eq!(y.shape().0, 5);
}

#[test]
fn sums_and_means_over_sequences() {
    let dev = Cpu::seed_from_u64(2);
    let m = dev.build_module::<Pools, f64>();
    let x: Tensor<Rank3<4, 5, 6>, f64, _> = dev.sample_normal();
    let y: Tensor<Rank2<4, 3>, f64, _> = m.forward(x.clone());
    let s = x.clone().sum::<Rank2<4, 6>, Axis<1>>();
    let mm = x.mean::<Rank2<4, 5>, Axis<2>>();
    let want = m.dense_0.forward(s) + m.dense_1.forward(mm);
    let (a, b) = (y.as_vec(), want.as_vec());
    for (p, q) in a.iter().zip(&b) {
        assert!((p - q).abs() <= 1e-12, "{p} vs {q}");
    }
}

/// `concatenate` along the features of `[seq, features]`.
pub struct JoinFeatures;

#[compact]
impl JoinFeatures {
    fn forward(x: Input<3, 4>) {
        concatenate((x, relu(x), x * 2.0), axis = -1)
    }
}

/// `concatenate` along the channels of images (a U-Net-style skip) and
/// along the sequence axis, then a head.
pub struct Skip;

#[compact]
impl Skip {
    fn forward(x: Input<2, 6, 6>) {
        let a = Conv(3, (3, 3))(x);
        let b = concatenate([x, a], -3);
        let c = flatten(concatenate((b, b), axis = -2));
        Dense(2)(c)
    }
}

#[test]
fn concatenate_joins_values_and_splits_gradients() {
    let dev = Cpu::seed_from_u64(3);
    let m = dev.build_module::<JoinFeatures, f64>();
    let x: Tensor<Rank3<2, 3, 4>, f64, _> = dev.sample_normal();
    let r: Tensor<Rank3<2, 3, 12>, f64, _> = dev.sample_normal();
    let y: Tensor<Rank3<2, 3, 12>, f64, _, _> = m.forward(x.leaky_trace());
    let (xs, ys) = (x.array(), y.array());
    for b in 0..2 {
        for s in 0..3 {
            for f in 0..4 {
                let v = xs[b][s][f];
                assert_eq!(ys[b][s][f], v);
                assert_eq!(ys[b][s][4 + f], v.max(0.0));
                assert_eq!(ys[b][s][8 + f], v * 2.0);
            }
        }
    }
    let g = (y * r.clone()).sum().backward().get(&x).array();
    let rs = r.array();
    for b in 0..2 {
        for s in 0..3 {
            for f in 0..4 {
                let relu_grad = if xs[b][s][f] > 0.0 { 1.0 } else { 0.0 };
                let want = rs[b][s][f] + relu_grad * rs[b][s][4 + f] + 2.0 * rs[b][s][8 + f];
                assert!((g[b][s][f] - want).abs() < 1e-12);
            }
        }
    }
}

#[test]
fn concatenate_along_channels_and_rows() {
    let dev = Cpu::seed_from_u64(4);
    let m = dev.build_module::<Skip, f32>();
    assert_eq!(m.dense_0.weight.shape().1, Const::<{ 5 * 12 * 6 }>);
    let x: Tensor<(usize, Const<2>, Const<6>, Const<6>), f32, _> =
        dev.sample_normal_like(&(3, Const, Const, Const));
    let y: Tensor<(usize, Const<2>), f32, _> = m.forward(x.clone());
    // By hand: the same joins on the host.
    let a = m.conv_0.forward(x.clone()).as_vec();
    let xs = x.as_vec();
    let mut c = Vec::new();
    for b in 0..3 {
        let mut img = Vec::new(); // [5, 6, 6]
        img.extend_from_slice(&xs[b * 72..(b + 1) * 72]);
        img.extend_from_slice(&a[b * 108..(b + 1) * 108]);
        for ch in 0..5 {
            let plane = &img[ch * 36..(ch + 1) * 36];
            c.extend_from_slice(plane);
            c.extend_from_slice(plane);
        }
    }
    let c: Tensor<(usize, Const<360>), f32, _> = dev.tensor_from_vec(c, (3, Const));
    assert_eq!(y.as_vec(), m.dense_0.forward(c).as_vec());
}
