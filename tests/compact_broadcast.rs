//! NumPy broadcasting of arithmetic on per-example shapes: the U-Net's
//! `h + temb` once `temb` is reshaped to `(c, 1, 1)`, a `[c]` vector added
//! to `[s, c]` rows, an outer product `[c, 1] * [1, w]`. Values against
//! the same sums written element by element, gradients against central
//! finite differences (f64, 1e-6).

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/gradcheck.rs"]
mod gradcheck;

use flaxen::prelude::*;

/// A time embedding added to every pixel of a map.
pub struct AddTemb;

#[compact]
impl AddTemb {
    fn forward(h: Input<4, 3, 5>, temb: Input<4>) {
        h + reshape(temb, (4, 1, 1))
    }
}

/// A bias row added to each row, and an outer product.
pub struct Rows;

#[compact]
impl Rows {
    fn forward(x: Input<3, 4>, v: Input<4>) {
        let y = x + v;
        let col = reshape(v, (4, 1));
        let row = reshape(v, (1, 4));
        let outer = col * row;
        y * mean(outer, axis = -1)
    }
}

#[test]
fn a_vector_broadcasts_over_every_pixel() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<AddTemb, f64>();
    let h: Tensor<Rank4<2, 4, 3, 5>, f64, Cpu> = dev.sample_normal();
    let t: Tensor<Rank2<2, 4>, f64, Cpu> = dev.sample_normal();
    let y = m.forward((h.clone(), t.clone())).as_vec();
    let (hv, tv) = (h.as_vec(), t.as_vec());
    for b in 0..2 {
        for c in 0..4 {
            for p in 0..15 {
                let i = (b * 4 + c) * 15 + p;
                assert_eq!(y[i], hv[i] + tv[b * 4 + c]);
            }
        }
    }
    // Gradients: each temb element gets the sum over its map.
    let w: Tensor<Rank4<2, 4, 3, 5>, f64, Cpu> = dev.sample_normal();
    let g = (m.forward((h.leaky_trace(), t.clone().leaky_traced())) * w.clone())
        .sum()
        .backward();
    let numeric = gradcheck::numeric_grad(
        |v| {
            let t: Tensor<Rank2<2, 4>, f64, Cpu> = dev.tensor(v.to_vec());
            (m.forward((h.clone(), t)) * w.clone())
                .sum::<Rank0, _>()
                .array()
        },
        &tv,
    );
    gradcheck::assert_grad("d / d temb", &g.get(&t).as_vec(), &numeric);
}

#[test]
fn rows_and_outer_products_broadcast() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Rows, f64>();
    let x: Tensor<Rank3<2, 3, 4>, f64, Cpu> = dev.sample_normal();
    let v: Tensor<Rank2<2, 4>, f64, Cpu> = dev.sample_normal();
    let y = m.forward((x.clone(), v.clone())).as_vec();
    let (xv, vv) = (x.as_vec(), v.as_vec());
    for b in 0..2 {
        let vb = &vv[b * 4..b * 4 + 4];
        let s: f64 = vb.iter().sum();
        for r in 0..3 {
            for c in 0..4 {
                // mean over the outer product's last axis: v[c] * mean(v).
                let want = (xv[(b * 3 + r) * 4 + c] + vb[c]) * (vb[c] * s / 4.0);
                let got = y[(b * 3 + r) * 4 + c];
                assert!((got - want).abs() < 1e-12, "{got} vs {want}");
            }
        }
    }
    let g = m
        .forward((x.leaky_trace(), v.clone().leaky_traced()))
        .sum()
        .backward();
    let numeric = gradcheck::numeric_grad(
        |vals| {
            let v: Tensor<Rank2<2, 4>, f64, Cpu> = dev.tensor(vals.to_vec());
            m.forward((x.clone(), v)).sum::<Rank0, _>().array()
        },
        &vv,
    );
    gradcheck::assert_grad("d / d v", &g.get(&v).as_vec(), &numeric);
}

/// One tensor on both sides of arithmetic, directly or through views that
/// keep its dfdx id (`reshape`, `transpose`): `x * x` once panicked in the
/// backward pass.
pub struct SameTensor;

#[compact]
impl SameTensor {
    fn forward(x: Input<3, 3>) {
        let sq = x * x;
        let sym = x + transpose(x, (-1, -2));
        sq + sym * reshape(flatten(x), (3, 3))
    }
}

#[test]
fn one_tensor_on_both_sides() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<SameTensor, f64>();
    let x: Tensor<Rank3<2, 3, 3>, f64, Cpu> = dev.sample_normal();
    let g = m.forward(x.leaky_trace()).sum().backward();
    let numeric = gradcheck::numeric_grad(
        |v| {
            let x: Tensor<Rank3<2, 3, 3>, f64, Cpu> = dev.tensor(v.to_vec());
            m.forward(x).sum::<Rank0, _>().array()
        },
        &x.as_vec(),
    );
    gradcheck::assert_grad("d / d x", &g.get(&x).as_vec(), &numeric);
}
