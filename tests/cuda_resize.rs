//! `Resize2D` (`jax.image.resize`) on dfdx's `Cuda` device: the composite
//! path of `FlaxenDevice::try_resize2d` (two `matmul`s with the
//! interpolation matrices).
//!
//! 1. jax parity, as `tests/layers_resize.rs` on `Cpu`: every case of
//!    `tests/fixtures/flax_resize.json` in f32 and f64 (tolerances in
//!    `tests/common/resize.rs`).
//! 2. Cuda == Cpu on random inputs with a run-time batch, every method,
//!    forward and input gradient (tolerances of `tests/common/cuda.rs`).
//!
//! Without a GPU this file still has to compile: see docs/cuda.md.
#![cfg(feature = "cuda")]

#[path = "common/cuda.rs"]
mod cuda_common;
#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/resize.rs"]
#[macro_use]
mod resize_fixture;

use cuda_common::assert_close;
use flaxen::prelude::*;
use flaxen::runtime::layers::{FlaxenDevice, ResizeGeometry, ResizeMethod};

#[test]
fn cuda_resize_matches_jax_f32() {
    all_resize_cases!(&Cuda::default(), f32);
}

#[test]
fn cuda_resize_matches_jax_f64() {
    all_resize_cases!(&Cuda::default(), f64);
}

macro_rules! cuda_vs_cpu {
    ($name:ident, $e:ty) => {
        #[test]
        fn $name() {
            let cpu = Cpu::seed_from_u64(7);
            let cuda = Cuda::default();
            let methods = [
                ResizeMethod::Nearest,
                ResizeMethod::Linear,
                ResizeMethod::Cubic,
                ResizeMethod::Lanczos3,
                ResizeMethod::Lanczos5,
            ];
            let sizes = [([7, 9], [14, 18]), ([7, 9], [3, 4]), ([13, 6], [5, 17])];
            for method in methods {
                for (hw, out) in sizes {
                    let g = ResizeGeometry::checked(method, true, hw, out);
                    let x: Tensor<(usize, usize, usize, usize), $e, Cpu> =
                        cpu.sample_normal_like(&(3, 2, hw[0], hw[1]));
                    let r: Tensor<(usize, usize, usize, usize), $e, Cpu> =
                        cpu.sample_normal_like(&(3, 2, out[0], out[1]));
                    let (gx, gr) = (x.to_device(&cuda), r.to_device(&cuda));
                    let y_shape = (3, 2, out[0], out[1]);
                    let y = cpu.try_resize2d(&g, x.leaky_trace(), y_shape).unwrap();
                    let gy = cuda.try_resize2d(&g, gx.leaky_trace(), y_shape).unwrap();
                    let what = format!("{method:?} {hw:?} -> {out:?}");
                    assert_close::<$e>(&format!("{what} y"), &y.as_vec(), &gy.as_vec());
                    let d = (y * r).sum().backward().get(&x).as_vec();
                    let gd = (gy * gr).sum().backward().get(&gx).as_vec();
                    assert_close::<$e>(&format!("{what} grad x"), &d, &gd);
                }
            }
        }
    };
}

cuda_vs_cpu!(cuda_resize_matches_cpu_f32, f32);
cuda_vs_cpu!(cuda_resize_matches_cpu_f64, f64);
