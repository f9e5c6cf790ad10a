//! The elementwise maths of the model language (`exp`, `log`, `sqrt`,
//! `rsqrt`, `sin`, `cos`, `abs`, `square`, `pow`, `clip`, `stop_gradient`)
//! against JAX in float64 (`tests/fixtures/jax_math.json`, made by
//! `tests/python/make_jax_math.py`): values and gradients within 1e-9 in
//! f64 and 1e-4 in f32 (relative to `max(|x|, 1)`), and central finite
//! differences within 1e-6.

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/gradcheck.rs"]
mod gradcheck;

use fixture::{assert_rel, Arr};
use flaxen::prelude::*;
use std::collections::BTreeMap;

#[derive(serde::Deserialize)]
struct Case {
    x: Arr,
    y: Arr,
    grad: Arr,
}

#[derive(serde::Deserialize)]
struct Fixture {
    w: Arr,
    cases: BTreeMap<String, Case>,
}

macro_rules! op_models {
    ($($name:ident => $body:expr;)*) => {
        $(
            pub struct $name;

            #[compact]
            impl $name {
                fn forward(x: Input<6>) {
                    $body
                }
            }
        )*
    };
}

op_models! {
    Exp => exp(x);
    Log => log(x);
    Sqrt => sqrt(x);
    Rsqrt => rsqrt(x);
    Sin => sin(x);
    Cos => cos(x);
    Abs => abs(x);
    Square => square(x);
    Pow25 => pow(x, 2.5);
    Pow3 => pow(x, p = 3.0);
    Clip => clip(x, -0.5, 0.8);
    StopGradient => stop_gradient(x);
}

/// Calls `$m!(Model, "fixture case")` for every op model.
macro_rules! every_op {
    ($m:ident) => {
        $m!(Exp, "exp");
        $m!(Log, "log");
        $m!(Sqrt, "sqrt");
        $m!(Rsqrt, "rsqrt");
        $m!(Sin, "sin");
        $m!(Cos, "cos");
        $m!(Abs, "abs");
        $m!(Square, "square");
        $m!(Pow25, "pow_2_5");
        $m!(Pow3, "pow_3");
        $m!(Clip, "clip");
        $m!(StopGradient, "stop_gradient");
    };
}

/// Values and gradients of model `M` in dtype `E` on the fixture case, on
/// device `$d` (`Cpu`, or `Cuda` with the `cuda` feature).
macro_rules! run {
    ($m:ty, $e:ty, $case:expr, $w:expr) => {
        run!($m, $e, $case, $w, Cpu)
    };
    ($m:ty, $e:ty, $case:expr, $w:expr, $d:ty) => {{
        let dev: $d = Default::default();
        let m = dev.build_module::<$m, $e>();
        let cast = |v: &[f64]| v.iter().map(|v| *v as $e).collect::<Vec<$e>>();
        let x: Tensor<Rank2<4, 6>, $e, $d> = dev.tensor(cast(&$case.x.data));
        let w: Tensor<Rank2<4, 6>, $e, $d> = dev.tensor(cast(&$w.data));
        let y = m.forward(x.clone()).as_vec();
        // `+ sum(x * 0)`: x has a gradient (zeros) even where the op
        // passes none (`stop_gradient`).
        let xt = x.leaky_trace();
        let loss = (m.forward(xt.with_empty_tape()) * w).sum() + (xt * 0.0).sum();
        let g = loss.backward();
        (y, g.get(&x).as_vec())
    }};
}

#[test]
fn every_op_matches_jax_and_finite_differences() {
    let f: Fixture = serde_json::from_str(include_str!("fixtures/jax_math.json")).unwrap();
    macro_rules! case {
        ($m:ty, $name:literal) => {{
            let c = &f.cases[$name];
            let (y, g64) = run!($m, f64, c, f.w);
            assert_rel(concat!($name, " f64"), &y, &c.y.data, 1e-9, 1.0);
            assert_rel(concat!($name, " grad f64"), &g64, &c.grad.data, 1e-9, 1.0);
            let (y, g) = run!($m, f32, c, f.w);
            assert_rel(concat!($name, " f32"), &y, &c.y.data, 1e-4, 1.0);
            assert_rel(concat!($name, " grad f32"), &g, &c.grad.data, 1e-4, 1.0);
            // Central differences of sum(op(x) * w) in f64 (none through
            // `stop_gradient`, whose values do depend on x).
            let dev: Cpu = Default::default();
            let m = dev.build_module::<$m, f64>();
            let w: Tensor<Rank2<4, 6>, f64, Cpu> = dev.tensor(f.w.data.clone());
            let loss = |v: &[f64]| {
                let x: Tensor<Rank2<4, 6>, f64, Cpu> = dev.tensor(v.to_vec());
                (m.forward(x) * w.clone()).sum::<Rank0, _>().array()
            };
            if $name != "stop_gradient" {
                let numeric = gradcheck::numeric_grad(loss, &c.x.data);
                gradcheck::assert_grad(concat!($name, " vs finite differences"), &g64, &numeric);
            } else {
                assert!(g64.iter().all(|v| *v == 0.0));
            }
        }};
    }
    every_op!(case);
    assert_eq!(f.cases.len(), 12);
}

/// `stop_gradient` inside a model: the gradient stops on one path and
/// flows on the other (`x * stop_gradient(x)` has gradient `x`, not `2x`).
pub struct HalfStopped;

#[compact]
impl HalfStopped {
    fn forward(x: Input<6>) {
        x * stop_gradient(x)
    }
}

#[test]
fn stop_gradient_stops_one_path() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<HalfStopped, f64>();
    let x: Tensor<Rank2<2, 6>, f64, Cpu> = dev.sample_normal();
    let g = m.forward(x.leaky_trace()).sum().backward();
    assert_eq!(g.get(&x).as_vec(), x.as_vec());
}

/// The same ops on dfdx's `Cuda` device (compiled by CI's `cuda,ci-check`
/// check, run where a GPU is).
#[cfg(feature = "cuda")]
#[test]
fn every_op_on_cuda_matches_jax() {
    let f: Fixture = serde_json::from_str(include_str!("fixtures/jax_math.json")).unwrap();
    macro_rules! case {
        ($m:ty, $name:literal) => {{
            let c = &f.cases[$name];
            let (y, g) = run!($m, f32, c, f.w, Cuda);
            assert_rel(concat!($name, " f32 on Cuda"), &y, &c.y.data, 1e-4, 1.0);
            assert_rel(
                concat!($name, " grad f32 on Cuda"),
                &g,
                &c.grad.data,
                1e-4,
                1.0,
            );
        }};
    }
    every_op!(case);
}

/// lm1b's `AddPositionEmbs` with the fixed table: `x + pe[:, :length]`.
pub struct AddPositions6;

#[compact]
impl AddPositions6 {
    fn forward(x: Input<5, 6>) {
        x + sinusoidal_positions(x, max_len = 16)
    }
}

pub struct AddPositions7;

#[compact]
impl AddPositions7 {
    fn forward(x: Input<5, 7>) {
        x + sinusoidal_positions(x, max_len = 16)
    }
}

#[derive(serde::Deserialize)]
struct Tables {
    sinusoidal: BTreeMap<String, Arr>,
}

#[test]
fn sinusoidal_positions_are_lm1bs_table() {
    let t: Tables = serde_json::from_str(include_str!("fixtures/jax_math.json")).unwrap();
    let dev: Cpu = Default::default();
    // The table added to zeros, in f32 (Flax's table is float32: NumPy's
    // float64 maths, then cast) and f64.
    let m = dev.build_module::<AddPositions6, f32>();
    let y = m.forward(dev.zeros::<Rank3<2, 5, 6>>()).as_vec();
    let want = &t.sinusoidal["6"].data;
    assert_rel("table f=6 (f32)", &y[..30], want, 1e-7, 1.0);
    assert_eq!(y[..30], y[30..], "every example the same rows");
    let m = dev.build_module::<AddPositions7, f64>();
    let y = m.forward(dev.zeros::<Rank3<1, 5, 7>>()).as_vec();
    assert_rel("table f=7 (f64)", &y, &t.sinusoidal["7"].data, 1e-7, 1.0);
    // The input's gradient passes through the addition untouched.
    let x: Tensor<Rank3<1, 5, 7>, f64, Cpu> = dev.sample_normal();
    let g = m.forward(x.leaky_trace()).sum().backward();
    assert!(g.get(&x).as_vec().iter().all(|v| *v == 1.0));
}
