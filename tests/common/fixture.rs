//! What every Flax/JAX fixture's checks share: a tensor as the fixtures
//! store it (`Arr`), its values in a dtype, a `Const`-shaped tensor of it,
//! and the tolerance `|got - want| <= tol * max(|want|, 1)` per element,
//! `tol` 1e-9 in f64 and 1e-4 in narrower types (inputs rounded to them).
//! A test that includes a fixture module (`norm_act.rs`, `conv_pool.rs`,
//! `conv_ext.rs`, `resize.rs`) includes this first, once, with
//! `#[path = "common/fixture.rs"] mod fixture;`; the fixture modules
//! re-export what their callers use.
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
    assert_eq!(got.len(), want.data.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(&want.data).enumerate() {
        let g = g.to_f64().unwrap();
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}[{i}]: got {g}, want {w}"
        );
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
