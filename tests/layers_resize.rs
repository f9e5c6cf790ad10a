//! `jax.image.resize` as flaxen's `Resize2D` on the Cpu:
//!
//! 1. jax parity: every case of `tests/fixtures/flax_resize.json` (every
//!    method, up and down, odd and non-square sizes, antialias on and off),
//!    forward values and input gradients, in f64 (within 1e-9) and f32
//!    (within 1e-4); see `tests/common/resize.rs`.
//! 2. Finite differences (f64, central): the input gradient of `loss =
//!    sum(resize(x) * r)`, within `1e-6 * max(|numeric|, 1)`.
//! 3. The CPU kernel (separable passes, `nearest` as copies) against the
//!    composite path (dense matrices through dfdx's `matmul`, the `Cuda`
//!    path) on random inputs with a run-time batch, within 1e-12.
//! 4. `#[compact]`'s `resize(x, (c, h, w), method = ..)` (strings, bare
//!    words, `x.shape` arithmetic, `antialias = false`) on the same jax
//!    cases, in f64.

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/resize.rs"]
#[macro_use]
mod resize_fixture;

#[path = "common/gradcheck.rs"]
mod gradcheck;

use flaxen::prelude::*;
use flaxen::runtime::layers::resize::{Cubic, Lanczos3, Linear, Nearest};
use flaxen::runtime::layers::{composite, FlaxenDevice, Resize2D, ResizeGeometry, ResizeMethod};

#[test]
fn cpu_matches_jax_f64() {
    all_resize_cases!(&Cpu::default(), f64);
}

#[test]
fn cpu_matches_jax_f32() {
    all_resize_cases!(&Cpu::default(), f32);
}

macro_rules! gradcheck {
    ($name:ident, $m:ty, $aa:literal, ($h:literal, $w:literal) -> ($oh:literal, $ow:literal)) => {
        #[test]
        fn $name() {
            let dev = Cpu::seed_from_u64(3);
            let layer = Resize2D::<2, $h, $w, $oh, $ow, $m, $aa>::default();
            let x: Tensor<Rank4<2, 2, $h, $w>, f64, _> = dev.sample_normal();
            let r: Tensor<Rank4<2, 2, $oh, $ow>, f64, _> = dev.sample_normal();
            let g = (layer.forward(x.leaky_trace()) * r.clone())
                .sum()
                .backward();
            let analytic = g.get(&x).as_vec();
            let loss = |v: &[f64]| {
                let x: Tensor<Rank4<2, 2, $h, $w>, f64, _> =
                    dev.tensor_from_vec(v.to_vec(), Default::default());
                (layer.forward(x) * r.clone()).sum::<Rank0, _>().array()
            };
            let numeric = gradcheck::numeric_grad(loss, &x.as_vec());
            gradcheck::assert_grad("x", &analytic, &numeric);
        }
    };
}

gradcheck!(gradcheck_nearest_mixed, Nearest, true, (5, 7) -> (9, 4));
gradcheck!(gradcheck_nearest_up_x3, Nearest, true, (3, 5) -> (9, 15));
gradcheck!(gradcheck_linear_up, Linear, true, (5, 3) -> (11, 7));
gradcheck!(gradcheck_linear_down_antialias, Linear, true, (9, 11) -> (4, 3));
gradcheck!(gradcheck_linear_down_plain, Linear, false, (9, 11) -> (4, 3));
gradcheck!(gradcheck_cubic_mixed, Cubic, true, (7, 5) -> (3, 12));
gradcheck!(gradcheck_lanczos3_mixed, Lanczos3, true, (6, 9) -> (13, 4));

/// The CPU kernel against the composite path, `usize` batch, every method.
fn cpu_vs_composite(method: ResizeMethod, antialias: bool, hw: [usize; 2], out: [usize; 2]) {
    let dev = Cpu::seed_from_u64(11);
    let g = ResizeGeometry::checked(method, antialias, hw, out);
    let x: Tensor<(usize, usize, usize, usize), f64, _> =
        dev.sample_normal_like(&(3, 4, hw[0], hw[1]));
    let r: Tensor<(usize, usize, usize, usize), f64, _> =
        dev.sample_normal_like(&(3, 4, out[0], out[1]));
    let y_shape = (3, 4, out[0], out[1]);
    let y = dev.try_resize2d(&g, x.leaky_trace(), y_shape).unwrap();
    let yc = composite::try_resize2d(&g, x.leaky_trace(), y_shape).unwrap();
    let what = format!("{method:?} aa {antialias} {hw:?} -> {out:?}");
    fixture::assert_rel(&format!("{what} y"), &y.as_vec(), &yc.as_vec(), 1e-12, 1.0);
    let gx = (y * r.clone()).sum().backward().get(&x).as_vec();
    let gc = (yc * r).sum().backward().get(&x).as_vec();
    fixture::assert_rel(&format!("{what} grad"), &gx, &gc, 1e-12, 1.0);
}

#[test]
fn cpu_matches_composite() {
    let methods = [
        ResizeMethod::Nearest,
        ResizeMethod::Linear,
        ResizeMethod::Cubic,
        ResizeMethod::Lanczos3,
        ResizeMethod::Lanczos5,
    ];
    let sizes = [
        ([7, 9], [14, 18]),
        ([7, 9], [21, 9]),
        ([7, 9], [3, 4]),
        ([13, 6], [5, 17]),
        ([1, 5], [3, 1]),
        ([8, 8], [8, 8]),
        ([16, 12], [8, 6]),
    ];
    for method in methods {
        for antialias in [true, false] {
            for (hw, out) in sizes {
                cpu_vs_composite(method, antialias, hw, out);
            }
        }
    }
}

#[test]
fn nearest_integer_upsample_repeats_pixels() {
    let dev: Cpu = Default::default();
    let x: Tensor<Rank4<1, 1, 2, 3>, f32, _> = dev.tensor([[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]]);
    let y = Resize2D::<1, 2, 3, 4, 6, Nearest>::default().forward(x);
    assert_eq!(
        y.array()[0][0],
        [
            [1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
            [1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
            [4.0, 4.0, 5.0, 5.0, 6.0, 6.0],
            [4.0, 4.0, 5.0, 5.0, 6.0, 6.0],
        ]
    );
}

/// `method` as Flax code writes it, a string, with jax's alias.
pub struct Bilinear;

#[compact]
impl Bilinear {
    fn forward(x: Input<3, 5, 7>) {
        resize(x, (3, 9, 4), method = "bilinear")
    }
}

/// A bare word, the sizes from the input's shape (the U-Net upsampling).
pub struct Double;

#[compact]
impl Double {
    fn forward(x: Input<3, 5, 7>) {
        resize(
            x,
            (x.shape[-3], 2 * x.shape[-2], 2 * x.shape[-1]),
            method = nearest,
        )
    }
}

/// Positional arguments in jax's order, and `antialias = false`.
pub struct Plain;

#[compact]
impl Plain {
    fn forward(x: Input<3, 9, 11>) {
        resize(x, (3, 4, 5), "linear", antialias = false)
    }
}

fn compact_case<M, const H: usize, const W: usize, const OH: usize, const OW: usize>(
    name: &str,
    model: &M,
) where
    M: Module<
        Tensor<Rank4<2, 3, H, W>, f64, Cpu, OwnedTape<f64, Cpu>>,
        Output = Tensor<Rank4<2, 3, OH, OW>, f64, Cpu, OwnedTape<f64, Cpu>>,
    >,
{
    let dev: Cpu = Default::default();
    let c = resize_fixture::case(name);
    let x: Tensor<Rank4<2, 3, H, W>, f64, _> = dev.tensor_from_vec(c.x.data, Default::default());
    let r: Tensor<Rank4<2, 3, OH, OW>, f64, _> = dev.tensor_from_vec(c.r.data, Default::default());
    let y = model.forward(x.leaky_trace());
    fixture::assert_within(name, &y.as_vec(), &c.y, 1e-9);
    let g = (y * r).sum().backward();
    fixture::assert_within(name, &g.get(&x).as_vec(), &c.grad_x, 1e-9);
}

#[test]
fn compact_resize_matches_jax() {
    let dev: Cpu = Default::default();
    compact_case::<_, 5, 7, 9, 4>("linear_mixed", &dev.build_module::<Bilinear, f64>());
    compact_case::<_, 5, 7, 10, 14>("nearest_up_x2", &dev.build_module::<Double, f64>());
    compact_case::<_, 9, 11, 4, 5>(
        "linear_down_no_antialias",
        &dev.build_module::<Plain, f64>(),
    );
    // Any batch, without a tape.
    let m = dev.build_module::<Double, f32>();
    let x: Tensor<(usize, Const<3>, Const<5>, Const<7>), f32, _> =
        dev.sample_normal_like(&(4, Const, Const, Const));
    let y: Tensor<(usize, Const<3>, Const<10>, Const<14>), f32, _> = m.forward(x);
    assert_eq!(y.shape().0, 4);
}
