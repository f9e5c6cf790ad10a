//! Finite differences (f64, central, step `1e-5`) and the tolerance the
//! gradient checks hold analytic gradients to: `|analytic - numeric| <=
//! 1e-6 * max(|numeric|, 1)`. Include with
//! `#[path = "common/gradcheck.rs"] mod gradcheck;`, after
//! `#[path = "common/fixture.rs"] mod fixture;`.
#![allow(dead_code)]

const EPS: f64 = 1e-5;

/// Central differences of `f` in every element of `at`.
pub fn numeric_grad(mut f: impl FnMut(&[f64]) -> f64, at: &[f64]) -> Vec<f64> {
    let mut v = at.to_vec();
    (0..v.len())
        .map(|i| {
            let orig = v[i];
            v[i] = orig + EPS;
            let hi = f(&v);
            v[i] = orig - EPS;
            let lo = f(&v);
            v[i] = orig;
            (hi - lo) / (2.0 * EPS)
        })
        .collect()
}

/// `analytic` against `numeric`, element by element.
pub fn assert_grad(what: &str, analytic: &[f64], numeric: &[f64]) {
    crate::fixture::assert_rel(what, analytic, numeric, 1e-6, 1.0);
}
