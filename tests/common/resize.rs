//! `tests/fixtures/flax_resize.json` (`jax.image.resize`, float64, made by
//! `tests/python/make_flax_resize.py`) and a macro that runs its cases
//! through [`Resize2D`](flaxen::runtime::layers::Resize2D) on any device,
//! shared by `tests/layers_resize.rs` (Cpu) and `tests/cuda_resize.rs`
//! (Cuda): include with `#[path = "common/resize.rs"] #[macro_use] mod
//! resize_fixture;`
//! and call `all_resize_cases!(&dev, f32)`.
//!
//! Each case checks forward values (with and without a tape) and the
//! gradient of `loss = sum(y * r)` w.r.t. the input. Tolerances: f64
//! `|got - jax| <= 1e-9 * max(|jax|, 1)`; f32 (inputs rounded to f32) `<=
//! 1e-4 * max(|jax|, 1)`.
#![allow(dead_code)]

use serde::Deserialize;

pub use crate::fixture::Arr;

#[derive(Deserialize)]
pub struct Case {
    pub name: String,
    pub method: String,
    pub antialias: bool,
    pub x: Arr,
    pub r: Arr,
    pub y: Arr,
    pub grad_x: Arr,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

/// Every case of the fixture.
pub fn cases() -> Vec<Case> {
    let f: Fixture = serde_json::from_str(include_str!("../fixtures/flax_resize.json"))
        .expect("tests/fixtures/flax_resize.json parses");
    f.cases
}

/// The case called `name`.
pub fn case(name: &str) -> Case {
    cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no resize case {name}"))
}

/// Runs the fixture case `$name` through `Resize2D<3, H, W, OH, OW, M, AA>`
/// on `$dev` in dtype `$e`.
macro_rules! resize_case {
    ($dev:expr, $e:ty, $name:literal, $m:ident, $aa:literal, ($h:literal, $w:literal) -> ($oh:literal, $ow:literal)) => {{
        use flaxen::prelude::*;
        use flaxen::runtime::layers::{resize, Resize2D};
        let c = resize_fixture::case($name);
        assert_eq!(c.x.shape, [2, 3, $h, $w], "{}", $name);
        assert_eq!(c.y.shape, [2, 3, $oh, $ow], "{}", $name);
        assert_eq!(c.antialias, $aa, "{}", $name);
        let dev = $dev;
        let x: Tensor<Rank4<2, 3, $h, $w>, $e, _> = crate::fixture::tensor(dev, &c.x);
        let r: Tensor<Rank4<2, 3, $oh, $ow>, $e, _> = crate::fixture::tensor(dev, &c.r);
        let layer = Resize2D::<3, $h, $w, $oh, $ow, resize::$m, $aa>::default();
        let y = layer.forward(x.leaky_trace());
        crate::fixture::assert_flax(&format!("{} y", $name), &y.as_vec(), &c.y);
        let y0 = layer.forward(x.clone());
        crate::fixture::assert_flax(&format!("{} y, no tape", $name), &y0.as_vec(), &c.y);
        let g = (y * r).sum().backward();
        crate::fixture::assert_flax(&format!("{} grad x", $name), &g.get(&x).as_vec(), &c.grad_x);
    }};
}

/// Every case of the fixture, with its types.
macro_rules! all_resize_cases {
    ($dev:expr, $e:ty) => {{
        let n = resize_fixture::cases().len();
        resize_case!($dev, $e, "nearest_up_x2", Nearest, true, (5, 7) -> (10, 14));
        resize_case!($dev, $e, "nearest_mixed", Nearest, true, (5, 7) -> (9, 4));
        resize_case!($dev, $e, "nearest_down_x3", Nearest, true, (9, 6) -> (3, 2));
        resize_case!($dev, $e, "nearest_up_odd", Nearest, true, (4, 5) -> (11, 13));
        resize_case!($dev, $e, "linear_up_x2", Linear, true, (3, 5) -> (6, 10));
        resize_case!($dev, $e, "linear_mixed", Linear, true, (5, 7) -> (9, 4));
        resize_case!($dev, $e, "linear_up_odd", Linear, true, (5, 7) -> (11, 15));
        resize_case!($dev, $e, "linear_down", Linear, true, (9, 11) -> (4, 5));
        resize_case!($dev, $e, "linear_down_no_antialias", Linear, false, (9, 11) -> (4, 5));
        resize_case!($dev, $e, "linear_width_only", Linear, true, (5, 7) -> (5, 12));
        resize_case!($dev, $e, "cubic_mixed", Cubic, true, (5, 7) -> (9, 4));
        resize_case!($dev, $e, "cubic_down_up", Cubic, true, (7, 5) -> (3, 11));
        resize_case!($dev, $e, "lanczos3_mixed", Lanczos3, true, (6, 7) -> (4, 13));
        resize_case!($dev, $e, "lanczos5_mixed", Lanczos5, true, (5, 9) -> (11, 4));
        assert_eq!(n, 14, "a fixture case is not run");
    }};
}
