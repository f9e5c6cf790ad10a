//! `tests/fixtures/flax_conv_pool.json` (Flax linen Conv / avg_pool /
//! max_pool forward values and gradients), shared by `tests/layers_fixtures.rs`
//! (Cpu) and `tests/cuda_layers.rs` (Cuda): include with
//! `#[path = "common/conv_pool.rs"] mod conv_pool;`.
#![allow(dead_code)]

use flaxen::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

#[derive(Deserialize)]
pub struct ConvCase {
    pub layer: String,
    pub x: Arr,
    pub kernel_oihw: Arr,
    pub bias: Arr,
    pub y: Arr,
    pub loss_weights_r: Arr,
    pub grad_x: Arr,
    pub grad_kernel_oihw: Arr,
    pub grad_bias: Arr,
}

#[derive(Deserialize)]
pub struct PoolCase {
    pub layer: String,
    pub x: Arr,
    pub y: Arr,
    pub loss_weights_r: Arr,
    pub grad_x: Arr,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub conv: Vec<ConvCase>,
    pub pool: Vec<PoolCase>,
}

pub fn fixture() -> Fixture {
    let text = include_str!("../fixtures/flax_conv_pool.json");
    serde_json::from_str(text).expect("fixture parses")
}

/// `|got - flax| <= 1e-4 * max(|flax|, 1)` for every element.
pub fn assert_flax<E: Dtype>(what: &str, got: &[E], want: &Arr) {
    assert_eq!(got.len(), want.data.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(&want.data).enumerate() {
        let g = g.to_f64().unwrap();
        let tol = 1e-4 * w.abs().max(1.0);
        assert!((g - w).abs() <= tol, "{what}[{i}]: got {g}, flax {w}");
    }
}

pub fn cast<E: Dtype>(a: &Arr) -> Vec<E> {
    a.data.iter().map(|&v| E::from_f64(v).unwrap()).collect()
}
