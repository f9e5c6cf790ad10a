//! Shared helpers of the `tests/cuda_*.rs` files (included with
//! `#[path = "common/cuda.rs"] mod cuda_common;`).
#![allow(dead_code)]

/// Cpu-vs-Cuda tolerance of `tests/cuda_smoke.rs`: `|cpu - cuda| <= ATOL +
/// RTOL * |cpu|` in f32 (cuBLAS and the CPU gemm sum in different orders).
pub const ATOL: f32 = 1e-5;
/// See [`ATOL`].
pub const RTOL: f32 = 1e-4;

/// `|cuda - cpu| <= atol + rtol * |cpu|` for every element.
pub fn assert_close_f32(what: &str, cpu: &[f32], cuda: &[f32], atol: f32, rtol: f32) {
    assert_eq!(cpu.len(), cuda.len(), "{what}: lengths differ");
    for (i, (&a, &b)) in cpu.iter().zip(cuda).enumerate() {
        let tol = atol + rtol * a.abs();
        assert!(
            (a - b).abs() <= tol,
            "{what}[{i}]: cpu {a} vs cuda {b} (|diff| {} > tol {tol})",
            (a - b).abs()
        );
    }
}

/// `|cuda - cpu| <= atol + rtol * |cpu|` for every element, in f64.
pub fn assert_close_f64(what: &str, cpu: &[f64], cuda: &[f64], atol: f64, rtol: f64) {
    assert_eq!(cpu.len(), cuda.len(), "{what}: lengths differ");
    for (i, (&a, &b)) in cpu.iter().zip(cuda).enumerate() {
        let tol = atol + rtol * a.abs();
        assert!(
            (a - b).abs() <= tol,
            "{what}[{i}]: cpu {a} vs cuda {b} (|diff| {} > tol {tol})",
            (a - b).abs()
        );
    }
}

/// The largest `|a - b| / max(|b|, 1)` over all elements (for messages).
pub fn worst_rel(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}
