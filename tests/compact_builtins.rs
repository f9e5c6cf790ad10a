//! The builtin maths against JAX (`tests/python/make_jax_builtins.py`,
//! `fixtures/jax_builtins.json`, float64): `maximum` / `minimum` (tensor
//! and tensor, tensor and number, with broadcasting), `select` (`jnp.where`,
//! tensors and numbers), `arange` and maths on numbers at expansion (the
//! DDPM U-Net's `get_timestep_embedding`), `**`; values and input
//! gradients within 1e-12 in f64 and 1e-5 in f32, plus `len`, `for m in t`
//! and `enumerate` at expansion.

#[path = "common/fixture.rs"]
mod fixture;

use fixture::{assert_rel, Arr};
use flaxen::prelude::*;
use std::collections::BTreeMap;

#[derive(serde::Deserialize)]
struct Case {
    inputs: Vec<Arr>,
    y: Arr,
    w: Arr,
    grads: Vec<Arr>,
}

#[derive(serde::Deserialize)]
struct Fixture {
    mask: Vec<bool>,
    attention_mask: Vec<bool>,
    cases: BTreeMap<String, Case>,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("fixtures/jax_builtins.json")).unwrap()
}

pub struct Extrema;

#[compact]
impl Extrema {
    fn forward(x: Input<5>, y: Input<5>) {
        maximum(x, y) + minimum(x, 0.25) - maximum(0.5 * y, x[..1])
    }
}

pub struct Select;

#[compact]
impl Select {
    fn forward(x: Input<2, 5>, y: Input<2, 5>, m: Mask<2, 5>) {
        select(m, x, y) + select(m, 2.0, y) + select(m, x, -1.0)
    }
}

/// The DDPM U-Net's `get_timestep_embedding(timesteps, embedding_dim)`.
pub struct Timestep;

#[compact]
impl Timestep {
    fn forward(t: Input<1>, embedding_dim: Param<16>, max_period: Param<10000>) {
        let half_dim = embedding_dim / 2;
        let emb = log(max_period) / (half_dim - 1);
        let emb = exp(arange(half_dim) * -emb);
        let emb = t * emb;
        concatenate((sin(emb), cos(emb)), axis = -1)
    }
}

pub struct Power;

#[compact]
impl Power {
    fn forward(x: Input<5>) {
        x * *3 + 2 * *3 * x
    }
}

/// `jnp.pad` with a constant and `jax.lax.slice_in_dim` on the last axis.
pub struct PadSlice;

#[compact]
impl PadSlice {
    fn forward(x: Input<2, 5>) {
        let p = pad(x, ((1, 2), (2, 0)), constant_values = 0.5) * 2.0;
        slice(p, 1, 6, axis = -1)
    }
}

/// Flax's functional `dot_product_attention` under a mask.
pub struct DotAttention;

#[compact]
impl DotAttention {
    fn forward(q: Input<4, 2, 3>, k: Input<5, 2, 3>, v: Input<5, 2, 6>, m: Mask<4, 5>) {
        dot_product_attention(q, k, v, mask = m)
    }
}

/// `len`, `for m in t` and `enumerate` run at expansion: a U-Net's
/// channel multipliers, one `Dense` per entry.
pub struct Widths;

#[compact]
impl Widths {
    fn forward(x: Input<4>, mults: Param<{ (1, 2, 4) }>) {
        let mut x = x;
        for (i, m) in enumerate(mults) {
            x = Dense(4 * m, name = format!("level_{i}"))(x);
        }
        for m in mults {
            x = x * m;
        }
        Dense(len(mults))(x)
    }
}

/// Python's precedence for `**`: `-x ** 2` is `-(x ** 2)`, `3 * x ** 2`
/// is `3 * (x ** 2)`, `2 ** 2 ** 3` is `2 ** 8`, `x / x ** 2` is `1 / x`.
pub struct Precedence;

#[compact]
impl Precedence {
    fn forward(x: Input<3>) {
        -x * *2 + 3 * x * *2 + x / x * *2 + 2 * *2 * *3 + (2 * x) * *2
    }
}

macro_rules! check_two {
    ($m:ty, $case:expr, $e:ty, $tol:expr, $shape:ty, $extra:expr) => {{
        let c = $case;
        let dev: Cpu = Default::default();
        let m = dev.build_module::<$m, $e>();
        let cast = |a: &Arr| a.data.iter().map(|v| *v as $e).collect::<Vec<$e>>();
        let x: Tensor<$shape, $e, Cpu> = dev.tensor(cast(&c.inputs[0]));
        let y: Tensor<$shape, $e, Cpu> = dev.tensor(cast(&c.inputs[1]));
        let w: Tensor<$shape, $e, Cpu> = dev.tensor(cast(&c.w));
        let (xt, yt) = (x.leaky_trace(), y.leaky_trace());
        let out = m.forward($extra(xt.with_empty_tape(), yt.with_empty_tape()));
        assert_rel("y", &out.as_vec(), &c.y.data, $tol, 1.0);
        let g = (m.forward($extra(xt, yt)) * w).sum().backward();
        assert_rel("dx", &g.get(&x).as_vec(), &c.grads[0].data, $tol, 1.0);
        assert_rel("dy", &g.get(&y).as_vec(), &c.grads[1].data, $tol, 1.0);
    }};
}

#[test]
fn maximum_and_minimum_match_jax() {
    let f = fixture();
    let c = &f.cases["extrema"];
    check_two!(Extrema, c, f64, 1e-12, Rank2<3, 5>, |a, b| (a, b));
    check_two!(Extrema, c, f32, 1e-5, Rank2<3, 5>, |a, b| (a, b));
}

#[test]
fn select_matches_jax_where() {
    let f = fixture();
    let c = &f.cases["select"];
    let dev: Cpu = Default::default();
    let mask: Tensor<Rank3<3, 2, 5>, bool, Cpu> = dev.tensor(f.mask.clone());
    check_two!(Select, c, f64, 1e-12, Rank3<3, 2, 5>, |a, b| (a, b, mask.clone()));
    check_two!(Select, c, f32, 1e-5, Rank3<3, 2, 5>, |a, b| (a, b, mask.clone()));
}

#[test]
fn timestep_embedding_matches_the_unets() {
    let f = fixture();
    let c = &f.cases["timestep"];
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Timestep, f64>();
    let t: Tensor<Rank2<3, 1>, f64, Cpu> = dev.tensor(c.inputs[0].data.clone());
    let w: Tensor<Rank2<3, 16>, f64, Cpu> = dev.tensor(c.w.data.clone());
    assert_rel("y", &m.forward(t.clone()).as_vec(), &c.y.data, 1e-12, 1.0);
    let g = (m.forward(t.leaky_trace()) * w).sum().backward();
    assert_rel("dt", &g.get(&t).as_vec(), &c.grads[0].data, 1e-9, 1.0);
}

#[test]
fn power_matches_jax() {
    let f = fixture();
    let c = &f.cases["power"];
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Power, f64>();
    let x: Tensor<Rank2<3, 5>, f64, Cpu> = dev.tensor(c.inputs[0].data.clone());
    let w: Tensor<Rank2<3, 5>, f64, Cpu> = dev.tensor(c.w.data.clone());
    assert_rel("y", &m.forward(x.clone()).as_vec(), &c.y.data, 1e-12, 1.0);
    let g = (m.forward(x.leaky_trace()) * w).sum().backward();
    assert_rel("dx", &g.get(&x).as_vec(), &c.grads[0].data, 1e-12, 1.0);
}

#[test]
fn pad_and_slice_match_jax() {
    let f = fixture();
    let c = &f.cases["pad_slice"];
    let dev: Cpu = Default::default();
    let m = dev.build_module::<PadSlice, f64>();
    let x: Tensor<Rank3<3, 2, 5>, f64, Cpu> = dev.tensor(c.inputs[0].data.clone());
    let w: Tensor<Rank3<3, 5, 5>, f64, Cpu> = dev.tensor(c.w.data.clone());
    assert_rel("y", &m.forward(x.clone()).as_vec(), &c.y.data, 1e-12, 1.0);
    let g = (m.forward(x.leaky_trace()) * w).sum().backward();
    assert_rel("dx", &g.get(&x).as_vec(), &c.grads[0].data, 1e-12, 1.0);
}

#[test]
fn dot_product_attention_matches_flax() {
    let f = fixture();
    let c = &f.cases["dot_attention"];
    let dev: Cpu = Default::default();
    let m = dev.build_module::<DotAttention, f64>();
    let q: Tensor<Rank4<3, 4, 2, 3>, f64, Cpu> = dev.tensor(c.inputs[0].data.clone());
    let k: Tensor<Rank4<3, 5, 2, 3>, f64, Cpu> = dev.tensor(c.inputs[1].data.clone());
    let v: Tensor<Rank4<3, 5, 2, 6>, f64, Cpu> = dev.tensor(c.inputs[2].data.clone());
    let mask: Tensor<Rank3<3, 4, 5>, bool, Cpu> = dev.tensor(f.attention_mask.clone());
    let w: Tensor<Rank4<3, 4, 2, 6>, f64, Cpu> = dev.tensor(c.w.data.clone());
    let y = m.forward((q.clone(), k.clone(), v.clone(), mask.clone()));
    assert_rel("y", &y.as_vec(), &c.y.data, 1e-12, 1.0);
    let (qt, kt, vt) = (q.leaky_trace(), k.leaky_trace(), v.leaky_trace());
    let g = (m.forward((qt, kt, vt, mask)) * w).sum().backward();
    assert_rel("dq", &g.get(&q).as_vec(), &c.grads[0].data, 1e-12, 1.0);
    assert_rel("dk", &g.get(&k).as_vec(), &c.grads[1].data, 1e-12, 1.0);
    assert_rel("dv", &g.get(&v).as_vec(), &c.grads[2].data, 1e-12, 1.0);
}

#[test]
fn power_binds_as_in_python() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Precedence, f64>();
    let x: Tensor<Rank2<1, 3>, f64, Cpu> = dev.tensor([[0.5, -1.5, 3.0]]);
    let y = m.forward(x.clone()).as_vec();
    for (v, x) in y.iter().zip(x.as_vec()) {
        let want = -(x * x) + 3.0 * x * x + 1.0 / x + 256.0 + 4.0 * x * x;
        assert!((v - want).abs() < 1e-12, "{v} {want}");
    }
}

#[test]
fn loops_over_tuples_unroll_at_expansion() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Widths, f32>();
    // level_0: 4 -> 4, level_1: 4 -> 8, level_2: 8 -> 16, then 16 -> 3.
    assert_eq!(m.level_1.weight.shape(), &(Const::<8>, Const::<4>));
    assert_eq!(m.level_2.weight.shape(), &(Const::<16>, Const::<8>));
    let y: Tensor<Rank2<2, 3>, f32, Cpu> = m.forward(dev.zeros::<Rank2<2, 4>>());
    assert_eq!(y.shape().1, Const::<3>);
}

/// The same on dfdx's `Cuda` device (compiled by CI's `cuda,ci-check`
/// check, run where a GPU is).
#[cfg(feature = "cuda")]
#[test]
fn builtins_on_cuda_match_jax() {
    let f = fixture();
    let c = &f.cases["timestep"];
    let dev: Cuda = Default::default();
    let m = dev.build_module::<Timestep, f32>();
    let t: Tensor<Rank2<3, 1>, f32, Cuda> = dev.tensor(
        c.inputs[0]
            .data
            .iter()
            .map(|v| *v as f32)
            .collect::<Vec<_>>(),
    );
    assert_rel("timestep", &m.forward(t).as_vec(), &c.y.data, 1e-4, 1.0);
    let c = &f.cases["extrema"];
    let m = dev.build_module::<Extrema, f32>();
    let cast = |a: &Arr| a.data.iter().map(|v| *v as f32).collect::<Vec<f32>>();
    let x: Tensor<Rank2<3, 5>, f32, Cuda> = dev.tensor(cast(&c.inputs[0]));
    let y: Tensor<Rank2<3, 5>, f32, Cuda> = dev.tensor(cast(&c.inputs[1]));
    assert_rel("extrema", &m.forward((x, y)).as_vec(), &c.y.data, 1e-5, 1.0);
}
