//! What every check against reference numbers shares: a tensor as the
//! fixtures store it (`Arr`), its values in a dtype, a `Const`-shaped tensor
//! of it, and the one tolerance rule of the tests, `|got - want| <= rel *
//! max(|want|, floor)` per element ([`assert_rel`], [`max_rel_error`]).
//! Flax/JAX fixtures hold `rel` = [`tol`] (1e-9 in f64, 1e-4 in narrower
//! types, inputs rounded to them) with `floor` 1. A test that includes a
//! fixture module (`norm_act.rs`, `conv_pool.rs`, `conv_ext.rs`,
//! `resize.rs`, `flax_cnn.rs`, `optax_tree.rs`, `gradcheck.rs`) includes
//! this first, once, with `#[path = "common/fixture.rs"] mod fixture;`; the
//! fixture modules re-export what their callers use.
#![allow(dead_code)]

use flaxen::prelude::*;
use serde::Deserialize;

/// A tensor of a fixture: its shape and its values, row-major.
#[derive(Deserialize)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

/// The tolerance for `E`: 1e-9 for f64, 1e-4 for narrower types.
pub fn tol<E>() -> f64 {
    if std::mem::size_of::<E>() >= 8 {
        1e-9
    } else {
        1e-4
    }
}

/// `got` against `want` within [`tol`]`::<E>()`.
pub fn assert_flax<E: Dtype>(what: &str, got: &[E], want: &Arr) {
    assert_within(what, got, want, tol::<E>());
}

/// `got` against `want` within `tol` (relative to `max(|want|, 1)`).
pub fn assert_within<E: Dtype>(what: &str, got: &[E], want: &Arr, tol: f64) {
    assert_rel(what, got, &want.data, tol, 1.0);
}

/// `|got - want| <= rel * max(|want|, floor)` for every element, in f64
/// whatever the dtypes (a NaN fails it). `floor` makes the tolerance
/// absolute near zero, where a relative one would demand exact zeros.
pub fn assert_rel<G: Dtype, W: Dtype>(what: &str, got: &[G], want: &[W], rel: f64, floor: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64().unwrap(), w.to_f64().unwrap());
        let tol = rel * w.abs().max(floor);
        assert!(
            (g - w).abs() <= tol,
            "{what}[{i}]: got {g}, want {w} (|diff| {}, tol {tol})",
            (g - w).abs()
        );
    }
}

/// The largest `|got - want| / max(|want|, floor)` over the elements, for a
/// test that reports how close a whole run came before it asserts; NaN if
/// any element is NaN, so that the assertion after it fails.
pub fn max_rel_error<G: Dtype, W: Dtype>(got: &[G], want: &[W], floor: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "length");
    got.iter().zip(want).fold(0.0, |worst, (g, w)| {
        let (g, w) = (g.to_f64().unwrap(), w.to_f64().unwrap());
        worse((g - w).abs() / w.abs().max(floor), worst)
    })
}

/// The larger of two errors, NaN if either is (`f64::max` would drop it,
/// and a NaN result would pass the test).
pub fn worse(a: f64, b: f64) -> f64 {
    if a.is_nan() || a > b {
        a
    } else {
        b
    }
}

/// The values as `E`.
pub fn cast<E: Dtype>(a: &Arr) -> Vec<E> {
    a.data.iter().map(|&v| E::from_f64(v).unwrap()).collect()
}

/// `a` as a tensor of the `Const` shape `S`, which must be `a`'s shape.
pub fn tensor<S: ConstShape, E: Dtype, D: TensorFromVec<E>>(dev: &D, a: &Arr) -> Tensor<S, E, D> {
    assert_eq!(
        S::default().concrete().into_iter().collect::<Vec<_>>(),
        a.shape
    );
    dev.tensor_from_vec(cast(a), S::default())
}
