//! flaxen's CPU kernels against the composite path (dfdx's own `gather` +
//! `matmul` ops, what `Cuda` runs), on the CPU in f64: forward values and
//! every gradient, with `Const` and `usize` batch dims, with and without a
//! tape, and with tensors used twice (gradients must accumulate).

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/geometries.rs"]
#[macro_use]
mod geometries;

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::UnbiasedLinear;
use flaxen::dfdx::shapes::Axes4;
use flaxen::prelude::*;
use flaxen::runtime::layers::{builder, composite, conv_out_size, AvgPool2D, MaxPool2D, PoolKind};

/// The kernel and the composite path sum in different orders, by a few
/// ulps of f64.
fn assert_same(what: &str, a: &[f64], b: &[f64]) {
    fixture::assert_rel(what, a, b, 1e-10, 1.0);
}

macro_rules! conv_vs_composite {
    ($name:ident, c = $c:literal, o = $o:literal, k = ($kh:literal, $kw:literal),
     s = ($sh:literal, $sw:literal), pad = ($pt:expr, $pb:expr, $pl:expr, $pr:expr),
     hw = ($h:literal, $w:literal)) => {
        #[test]
        fn $name() {
            const P: [usize; 4] = [$pt, $pb, $pl, $pr];
            const OH: usize = conv_out_size($h, $kh, $sh, P[0], P[1]);
            const OW: usize = conv_out_size($w, $kw, $sw, P[2], P[3]);
            type L = builder::Conv2D<
                $c,
                $o,
                $kh,
                $kw,
                $sh,
                $sw,
                { P[0] },
                { P[1] },
                { P[2] },
                { P[3] },
                $h,
                $w,
                OH,
                OW,
            >;
            let dev: Cpu = Default::default();
            let mut conv = dev.build_module::<L, f64>();
            conv.bias = dev.sample_normal();
            let geom = L::GEOMETRY;

            // Const batch: y is used twice and x feeds a second op, so the
            // backward passes must add into existing gradients.
            let x: Tensor<Rank4<3, $c, $h, $w>, f64, _> = dev.sample_normal();
            let r1: Tensor<Rank4<3, $o, OH, OW>, f64, _> = dev.sample_normal();
            let r2: Tensor<Rank4<3, $o, OH, OW>, f64, _> = dev.sample_normal();
            let run = |fast: bool| {
                let y = if fast {
                    conv.forward(x.leaky_trace())
                } else {
                    composite::try_conv2d(
                        &geom,
                        x.leaky_trace(),
                        &conv.weight,
                        &conv.bias,
                        Default::default(),
                    )
                    .unwrap()
                };
                let y_values = y.as_vec();
                let y_again = (y.with_empty_tape() * r2.clone()).sum();
                let x_again = (x.leaky_trace() * 2.0).sum();
                let g = ((y * r1.clone()).sum() + y_again + x_again).backward();
                (
                    y_values,
                    g.get(&x).as_vec(),
                    g.get(&conv.weight).as_vec(),
                    g.get(&conv.bias).as_vec(),
                )
            };
            let (fast, slow) = (run(true), run(false));
            assert_same("y", &fast.0, &slow.0);
            assert_same("grad x", &fast.1, &slow.1);
            assert_same("grad w", &fast.2, &slow.2);
            assert_same("grad b", &fast.3, &slow.3);

            // usize batch, through the device trait and the module.
            let xu: Tensor<(usize, Const<$c>, Const<$h>, Const<$w>), f64, _> =
                dev.sample_normal_like(&(5, Const, Const, Const));
            let ru: Tensor<(usize, Const<$o>, Const<OH>, Const<OW>), f64, _> =
                dev.sample_normal_like(&(5, Const, Const, Const));
            let fast = conv.forward(xu.leaky_trace());
            let slow = composite::try_conv2d(
                &geom,
                xu.leaky_trace(),
                &conv.weight,
                &conv.bias,
                (5, Const, Const, Const),
            )
            .unwrap();
            let slow_y = slow.as_vec();
            assert_same("usize y", &fast.as_vec(), &slow_y);
            assert_same(
                "usize y, no tape",
                &conv.forward(xu.clone()).as_vec(),
                &slow_y,
            );
            let gf = (fast * ru.clone()).sum().backward();
            let gs = (slow * ru.clone()).sum().backward();
            assert_same("usize grad x", &gf.get(&xu).as_vec(), &gs.get(&xu).as_vec());
            assert_same(
                "usize grad w",
                &gf.get(&conv.weight).as_vec(),
                &gs.get(&conv.weight).as_vec(),
            );
            assert_same(
                "usize grad b",
                &gf.get(&conv.bias).as_vec(),
                &gs.get(&conv.bias).as_vec(),
            );
        }
    };
}

conv_geometries!(conv_vs_composite);

macro_rules! pool_vs_composite {
    ($name:ident, $pool:ident, c = $c:literal, k = ($kh:literal, $kw:literal),
     s = ($sh:literal, $sw:literal), pad = ($pt:literal, $pb:literal, $pl:literal, $pr:literal),
     hw = ($h:literal, $w:literal)) => {
        #[test]
        fn $name() {
            const OH: usize = conv_out_size($h, $kh, $sh, $pt, $pb);
            const OW: usize = conv_out_size($w, $kw, $sw, $pl, $pr);
            type L = $pool<$c, $kh, $kw, $sh, $sw, $pt, $pb, $pl, $pr, $h, $w, OH, OW>;
            let dev: Cpu = Default::default();
            let win = L::GEOMETRY;
            for batch in [1usize, 4] {
                let x: Tensor<(usize, Const<$c>, Const<$h>, Const<$w>), f64, _> =
                    dev.sample_normal_like(&(batch, Const, Const, Const));
                let r: Tensor<(usize, Const<$c>, Const<OH>, Const<OW>), f64, _> =
                    dev.sample_normal_like(&(batch, Const, Const, Const));
                let fast = L::default().forward(x.leaky_trace());
                let slow = composite::try_pool2d(
                    L::KIND,
                    $c,
                    &win,
                    x.leaky_trace(),
                    (batch, Const, Const, Const),
                )
                .unwrap();
                assert_same("y", &fast.as_vec(), &slow.as_vec());
                assert_same(
                    "y, no tape",
                    &L::default().forward(x.clone()).as_vec(),
                    &slow.as_vec(),
                );
                let gf = (fast * r.clone()).sum().backward();
                let gs = (slow * r.clone()).sum().backward();
                assert_same("grad x", &gf.get(&x).as_vec(), &gs.get(&x).as_vec());
            }
        }
    };
}

pool_geometries!(pool_vs_composite);

#[test]
fn non_contiguous_inputs() {
    // A permuted (transposed H/W) input: the CPU kernels must send its
    // gradient back through the permutation like the composite path does.
    type L = builder::Conv2D<2, 3, 3, 2, 1, 2, 1, 1, 0, 1, 5, 4, OH, OW>;
    const OH: usize = conv_out_size(5, 3, 1, 1, 1);
    const OW: usize = conv_out_size(4, 2, 2, 0, 1);
    let dev: Cpu = Default::default();
    let conv = dev.build_module::<L, f64>();
    let xt: Tensor<Rank4<2, 2, 4, 5>, f64, _> = dev.sample_normal();
    let r: Tensor<Rank4<2, 3, OH, OW>, f64, _> = dev.sample_normal();
    let x = || {
        xt.leaky_trace()
            .permute::<Rank4<2, 2, 5, 4>, Axes4<0, 1, 3, 2>>()
    };
    let fast = conv.forward(x());
    let slow = composite::try_conv2d(
        &L::GEOMETRY,
        x(),
        &conv.weight,
        &conv.bias,
        Default::default(),
    )
    .unwrap();
    assert_same("y", &fast.as_vec(), &slow.as_vec());
    let gf = (fast * r.clone()).sum().backward();
    let gs = (slow * r.clone()).sum().backward();
    assert_same("grad x", &gf.get(&xt).as_vec(), &gs.get(&xt).as_vec());
    assert_same(
        "grad w",
        &gf.get(&conv.weight).as_vec(),
        &gs.get(&conv.weight).as_vec(),
    );

    let pool = MaxPool2D::<2, 2, 2, 1, 1, 0, 1, 0, 1, 5, 4, 5, 4>;
    let rp: Tensor<Rank4<2, 2, 5, 4>, f64, _> = dev.sample_normal();
    let fast = pool.forward(x());
    let slow =
        composite::try_pool2d(PoolKind::Max, 2, &pool_geometry(), x(), Default::default()).unwrap();
    assert_same("pool y", &fast.as_vec(), &slow.as_vec());
    let gf = (fast * rp.clone()).sum().backward();
    let gs = (slow * rp.clone()).sum().backward();
    assert_same("pool grad x", &gf.get(&xt).as_vec(), &gs.get(&xt).as_vec());
}

fn pool_geometry() -> flaxen::runtime::layers::Window2D {
    MaxPool2D::<2, 2, 2, 1, 1, 0, 1, 0, 1, 5, 4, 5, 4>::GEOMETRY
}

/// `NoInputGrad` changes nothing but the input's gradient: the parameters'
/// gradients match the plain call's, and the input gets none.
#[test]
fn no_input_grad_keeps_parameter_gradients() {
    type L = builder::Conv2D<2, 3, 3, 3, 2, 1, 1, 1, 0, 2, 7, 6, 4, 6>;
    let dev: Cpu = Default::default();
    let conv = dev.build_module::<L, f64>();
    let x: Tensor<Rank4<5, 2, 7, 6>, f64, _> = dev.sample_normal();
    let probe: Tensor<Rank4<5, 3, 4, 6>, f64, _> = dev.sample_normal();
    let plain = (conv.forward(x.leaky_trace()) * probe.clone())
        .sum()
        .backward();
    let skipped = (conv.forward(NoInputGrad(x.leaky_trace())) * probe)
        .sum()
        .backward();
    assert_same(
        "weight",
        &skipped.get(&conv.weight).as_vec(),
        &plain.get(&conv.weight).as_vec(),
    );
    assert_same(
        "bias",
        &skipped.get(&conv.bias).as_vec(),
        &plain.get(&conv.bias).as_vec(),
    );
    assert!(plain.get(&x).as_vec().iter().any(|&v| v != 0.0));
    let missing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| skipped.get(&x)));
    assert!(missing.is_err(), "x has no gradient");
}

/// flaxen's `Dense` (its own CPU kernel) against dfdx's `Linear` with the
/// same parameters: outputs and all gradients, on a small product and on
/// one large enough for gemm's threaded path, with a `usize` batch.
#[test]
fn dense_matches_dfdx_linear() {
    fn check<const I: usize, const O: usize>(batch: usize) {
        let dev: Cpu = Default::default();
        let mut linear = dev.build_module::<Linear<I, O>, f64>();
        let mut dense = dev.build_module::<builder::Dense<I, O>, f64>();
        dense.weight = linear.weight.clone();
        dense.bias = dev.sample_normal();
        linear.bias = dense.bias.clone();
        let x: Tensor<(usize, Const<I>), f64, _> = dev.sample_normal_like(&(batch, Const));
        let probe: Tensor<(usize, Const<O>), f64, _> = dev.sample_normal_like(&(batch, Const));
        let ya = dense.forward(x.leaky_trace());
        let yb = linear.forward(x.leaky_trace());
        assert_same("y", &ya.as_vec(), &yb.as_vec());
        let ga = (ya * probe.clone()).sum().backward();
        let gb = (yb * probe).sum().backward();
        assert_same("dx", &ga.get(&x).as_vec(), &gb.get(&x).as_vec());
        assert_same(
            "dw",
            &ga.get(&dense.weight).as_vec(),
            &gb.get(&linear.weight).as_vec(),
        );
        assert_same(
            "db",
            &ga.get(&dense.bias).as_vec(),
            &gb.get(&linear.bias).as_vec(),
        );
    }
    check::<7, 5>(3);
    check::<400, 300>(9);
}

/// `Dense` on `(B, S, I)` (Flax's Dense on the last axis) and
/// `UnbiasedDense` against dfdx's `Linear` / `UnbiasedLinear` with the same
/// parameters: outputs and all gradients, `usize` batch and sequence dims.
#[test]
fn dense_on_sequences_and_unbiased_match_dfdx() {
    use flaxen::runtime::layers::UnbiasedDense;
    let dev: Cpu = Default::default();
    let linear = dev.build_module::<Linear<6, 4>, f64>();
    let mut dense = dev.build_module::<builder::Dense<6, 4>, f64>();
    dense.weight = linear.weight.clone();
    dense.bias = linear.bias.clone();
    let x: Tensor<(usize, usize, Const<6>), f64, _> = dev.sample_normal_like(&(3, 5, Const));
    let probe: Tensor<(usize, usize, Const<4>), f64, _> = dev.sample_normal_like(&(3, 5, Const));
    let ya = dense.forward(x.leaky_trace());
    let yb = linear.forward(x.leaky_trace());
    assert_eq!(ya.shape(), &(3, 5, Const::<4>));
    assert_same("y", &ya.as_vec(), &yb.as_vec());
    let ga = (ya * probe.clone()).sum().backward();
    let gb = (yb * probe.clone()).sum().backward();
    assert_same("dx", &ga.get(&x).as_vec(), &gb.get(&x).as_vec());
    assert_same(
        "dw",
        &ga.get(&dense.weight).as_vec(),
        &gb.get(&linear.weight).as_vec(),
    );
    assert_same(
        "db",
        &ga.get(&dense.bias).as_vec(),
        &gb.get(&linear.bias).as_vec(),
    );

    let unbiased = dev.build_module::<UnbiasedLinear<6, 4>, f64>();
    let mut ours = dev.build_module::<builder::UnbiasedDense<6, 4>, f64>();
    ours.weight = unbiased.weight.clone();
    let _: &UnbiasedDense<6, 4, f64, Cpu> = &ours;
    let ya = ours.forward(x.leaky_trace());
    let yb = unbiased.forward(x.leaky_trace());
    assert_same("unbiased y", &ya.as_vec(), &yb.as_vec());
    let ga = (ya * probe.clone()).sum().backward();
    let gb = (yb * probe).sum().backward();
    assert_same("unbiased dx", &ga.get(&x).as_vec(), &gb.get(&x).as_vec());
    assert_same(
        "unbiased dw",
        &ga.get(&ours.weight).as_vec(),
        &gb.get(&unbiased.weight).as_vec(),
    );
    let xr: Tensor<Rank2<2, 6>, f64, _> = dev.sample_normal();
    assert_same(
        "unbiased rank 2",
        &ours.forward(xr.clone()).as_vec(),
        &unbiased.forward(xr).as_vec(),
    );
}

/// flaxen's `Relu` (its own CPU kernel) against dfdx's `relu`: values and
/// the input gradient, with exact zeros in the input and the output used
/// twice (gradients accumulate).
#[test]
fn relu_matches_dfdx() {
    use flaxen::runtime::layers::Relu;
    let dev: Cpu = Default::default();
    let mut v: Vec<f64> = (0..70_001).map(|i| ((i as f64) * 0.37).sin()).collect();
    v[5] = 0.0;
    v[70_000] = -0.0;
    let x: Tensor<(usize,), f64, _> = dev.tensor_from_vec(v, (70_001,));
    let probe: Tensor<(usize,), f64, _> = dev.sample_normal_like(&(70_001,));
    let ya = Relu.forward(x.leaky_trace());
    let yb = x.leaky_trace().relu();
    assert_same(
        "y",
        &ya.retaped::<NoneTape>().as_vec(),
        &yb.retaped::<NoneTape>().as_vec(),
    );
    let ga = ((ya * probe.clone()).sum() + Relu.forward(x.leaky_trace()).sum()).backward();
    let gb = ((yb * probe).sum() + x.leaky_trace().relu().sum()).backward();
    assert_same("dx", &ga.get(&x).as_vec(), &gb.get(&x).as_vec());
}
