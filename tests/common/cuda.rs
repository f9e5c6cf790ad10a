//! Shared helpers of the `tests/cuda_*.rs` files (included with
//! `#[path = "common/cuda.rs"] mod cuda_common;`).
#![allow(dead_code)]

use flaxen::prelude::*;

/// How close a Cuda result must be to the Cpu one: `|cuda - cpu| <= ATOL +
/// RTOL * |cpu|` per element.
pub trait CudaTolerance: Dtype {
    const ATOL: f64;
    const RTOL: f64;
}

/// f32: cuBLAS and flaxen's CPU gemm sum in different orders.
impl CudaTolerance for f32 {
    const ATOL: f64 = 1e-5;
    const RTOL: f64 = 1e-4;
}

/// f64: about what `tests/layers_composite.rs` holds the CPU kernels to
/// against the composite path.
impl CudaTolerance for f64 {
    const ATOL: f64 = 1e-10;
    const RTOL: f64 = 1e-10;
}

/// `|cuda - cpu| <= E::ATOL + E::RTOL * |cpu|` for every element.
pub fn assert_close<E: CudaTolerance>(what: &str, cpu: &[E], cuda: &[E]) {
    assert_eq!(cpu.len(), cuda.len(), "{what}: lengths differ");
    for (i, (a, b)) in cpu.iter().zip(cuda).enumerate() {
        let (a, b) = (a.to_f64().unwrap(), b.to_f64().unwrap());
        let tol = E::ATOL + E::RTOL * a.abs();
        assert!(
            (a - b).abs() <= tol,
            "{what}[{i}]: cpu {a} vs cuda {b} (|diff| {} > tol {tol})",
            (a - b).abs()
        );
    }
}
