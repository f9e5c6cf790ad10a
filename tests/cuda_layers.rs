//! flaxen's conv and pooling layers on dfdx's `Cuda` device (the composite
//! gather + matmul path of `FlaxenDevice for Cuda`).
//!
//! 1. Flax parity, as `tests/layers_fixtures.rs` on `Cpu`: every case of
//!    `tests/fixtures/flax_conv_pool.json`, forward values and the gradients
//!    of `loss = sum(y * loss_weights_r)` w.r.t. the input, the kernel and
//!    the bias, in f32 and f64. Tolerance (as on Cpu): `|cuda - flax| <=
//!    1e-4 * max(|flax|, 1)` per element.
//!    Likewise `tests/fixtures/flax_norm_act.json` (BatchNorm, LayerNorm,
//!    activations; tolerances in `tests/common/norm_act.rs`).
//! 2. Cuda == Cpu on random cases (every geometry of
//!    `tests/common/geometries.rs`, in f32 and f64): the same layer (parameters built on Cpu
//!    and moved with `to_device`) on the same inputs, `Const` and `usize`
//!    batch, forward and every gradient. Tolerance: in f32 `|cuda - cpu| <=
//!    1e-5 + 1e-4 * |cpu|` (`tests/cuda_smoke.rs`: cuBLAS and flaxen's CPU
//!    gemm sum in different orders); in f64 `<= 1e-10 + 1e-10 * |cpu|` (about
//!    the tolerance `tests/layers_composite.rs` holds the CPU kernels to
//!    against the composite path).
//!
//! Without a GPU this file still has to compile: see docs/cuda.md.
#![cfg(feature = "cuda")]

#[path = "common/cuda.rs"]
mod cuda_common;
#[path = "common/geometries.rs"]
#[macro_use]
mod geometries;

use cuda_common::assert_close;
use flaxen::dfdx::nn::ToDevice;
use flaxen::prelude::*;
use flaxen::runtime::layers::{builder, conv_out_size, AvgPool2D, MaxPool2D};

// ---------------------------------------------------------------- fixtures

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/conv_pool.rs"]
mod conv_pool;

#[test]
fn cuda_conv_matches_flax_f32() {
    conv_pool::all_conv_cases!(&Cuda::default(), f32);
}

#[test]
fn cuda_conv_matches_flax_f64() {
    conv_pool::all_conv_cases!(&Cuda::default(), f64);
}

#[test]
fn cuda_pool_matches_flax_f32() {
    conv_pool::all_pool_cases!(&Cuda::default(), f32);
}

#[test]
fn cuda_pool_matches_flax_f64() {
    conv_pool::all_pool_cases!(&Cuda::default(), f64);
}

#[path = "common/norm_act.rs"]
mod norm_act;

#[allow(unused_macros, unused_imports)]
#[path = "common/compact_v2.rs"]
mod compact_v2;

#[path = "common/attention_flax.rs"]
mod attention_flax;

// Token ids, masks, Embed, masked self- and cross-attention against Flax.
#[test]
fn cuda_attention_models_match_flax_f32() {
    attention_flax::classifier_case!(&Cuda::default(), f32);
    attention_flax::decoder_case!(&Cuda::default(), f32);
}

#[test]
fn cuda_attention_models_match_flax_f64() {
    attention_flax::classifier_case!(&Cuda::default(), f64);
    attention_flax::decoder_case!(&Cuda::default(), f64);
}

/// BatchNorm, LayerNorm and the activations against Flax, through
/// `#[compact]` models, as `tests/layers_norm_act.rs` on Cpu (same
/// tolerances: see `tests/common/norm_act.rs`).
#[test]
fn cuda_norm_and_activations_match_flax_f32() {
    norm_act::all_cases!(&Cuda::default(), f32);
}

#[test]
fn cuda_norm_and_activations_match_flax_f64() {
    norm_act::all_cases!(&Cuda::default(), f64);
}

#[path = "common/conv_ext.rs"]
#[macro_use]
mod conv_ext;

/// Grouped, depthwise and dilated `Conv` and `ConvTranspose` against Flax
/// (`tests/fixtures/flax_conv_ext.json`), as `tests/layers_conv_ext.rs` on
/// Cpu: within 1e-4 in f32 and 1e-9 in f64, relative to `max(|flax|, 1)`.
#[test]
fn cuda_conv_ext_matches_flax_f32() {
    all_grouped_dilated_cases!(&Cuda::default(), f32);
    all_transpose_cases!(&Cuda::default(), f32);
}

#[test]
fn cuda_conv_ext_matches_flax_f64() {
    all_grouped_dilated_cases!(&Cuda::default(), f64);
    all_transpose_cases!(&Cuda::default(), f64);
}

// ------------------------------------------------------- Cuda == Cpu kernels

macro_rules! conv_cuda_vs_cpu {
    ($name:ident, $e:ty, c = $c:literal, o = $o:literal, k = ($kh:literal, $kw:literal),
     s = ($sh:literal, $sw:literal), pad = ($pt:expr, $pb:expr, $pl:expr, $pr:expr),
     hw = ($h:literal, $w:literal)) => {
        #[test]
        fn $name() {
            const P: [usize; 4] = [$pt, $pb, $pl, $pr];
            const OH: usize = conv_out_size($h, $kh, $sh, P[0], P[1]);
            const OW: usize = conv_out_size($w, $kw, $sw, P[2], P[3]);
            type L = builder::Conv2D<
                $c, $o, $kh, $kw, $sh, $sw, { P[0] }, { P[1] }, { P[2] }, { P[3] }, $h, $w, OH, OW,
            >;
            let cpu = Cpu::seed_from_u64(5);
            let cuda = Cuda::default();
            let mut conv = cpu.build_module::<L, $e>();
            conv.bias = cpu.sample_normal();
            let gconv = conv.to_device(&cuda);
            let cmp = assert_close::<$e>;

            // Const batch.
            let x: Tensor<Rank4<3, $c, $h, $w>, $e, Cpu> = cpu.sample_normal();
            let r: Tensor<Rank4<3, $o, OH, OW>, $e, Cpu> = cpu.sample_normal();
            let (gx, gr) = (x.to_device(&cuda), r.to_device(&cuda));
            let y = conv.forward(x.leaky_trace());
            let gy = gconv.forward(gx.leaky_trace());
            cmp("y", &y.as_vec(), &gy.as_vec());
            cmp("y, no tape", &conv.forward(x.clone()).as_vec(), &gconv.forward(gx.clone()).as_vec());
            let g = (y * r).sum().backward();
            let gg = (gy * gr).sum().backward();
            cmp("grad x", &g.get(&x).as_vec(), &gg.get(&gx).as_vec());
            cmp("grad w", &g.get(&conv.weight).as_vec(), &gg.get(&gconv.weight).as_vec());
            cmp("grad b", &g.get(&conv.bias).as_vec(), &gg.get(&gconv.bias).as_vec());

            // usize batch.
            let x: Tensor<(usize, Const<$c>, Const<$h>, Const<$w>), $e, Cpu> =
                cpu.sample_normal_like(&(5, Const, Const, Const));
            let r: Tensor<(usize, Const<$o>, Const<OH>, Const<OW>), $e, Cpu> =
                cpu.sample_normal_like(&(5, Const, Const, Const));
            let (gx, gr) = (x.to_device(&cuda), r.to_device(&cuda));
            let y = conv.forward(x.leaky_trace());
            let gy = gconv.forward(gx.leaky_trace());
            assert_eq!(gy.shape().0, 5);
            cmp("usize y", &y.as_vec(), &gy.as_vec());
            let g = (y * r).sum().backward();
            let gg = (gy * gr).sum().backward();
            cmp("usize grad x", &g.get(&x).as_vec(), &gg.get(&gx).as_vec());
            cmp("usize grad w", &g.get(&conv.weight).as_vec(), &gg.get(&gconv.weight).as_vec());
            cmp("usize grad b", &g.get(&conv.bias).as_vec(), &gg.get(&gconv.bias).as_vec());
        }
    };
}

macro_rules! pool_cuda_vs_cpu {
    ($name:ident, $e:ty, $pool:ident, c = $c:literal, k = ($kh:literal, $kw:literal),
     s = ($sh:literal, $sw:literal), pad = ($pt:literal, $pb:literal, $pl:literal, $pr:literal),
     hw = ($h:literal, $w:literal)) => {
        #[test]
        fn $name() {
            const OH: usize = conv_out_size($h, $kh, $sh, $pt, $pb);
            const OW: usize = conv_out_size($w, $kw, $sw, $pl, $pr);
            type L = $pool<$c, $kh, $kw, $sh, $sw, $pt, $pb, $pl, $pr, $h, $w, OH, OW>;
            let cpu = Cpu::seed_from_u64(6);
            let cuda = Cuda::default();
            let cmp = assert_close::<$e>;
            for batch in [1usize, 4] {
                let x: Tensor<(usize, Const<$c>, Const<$h>, Const<$w>), $e, Cpu> =
                    cpu.sample_normal_like(&(batch, Const, Const, Const));
                let r: Tensor<(usize, Const<$c>, Const<OH>, Const<OW>), $e, Cpu> =
                    cpu.sample_normal_like(&(batch, Const, Const, Const));
                let (gx, gr) = (x.to_device(&cuda), r.to_device(&cuda));
                let y = L::default().forward(x.leaky_trace());
                let gy = L::default().forward(gx.leaky_trace());
                cmp("y", &y.as_vec(), &gy.as_vec());
                cmp(
                    "y, no tape",
                    &L::default().forward(x.clone()).as_vec(),
                    &L::default().forward(gx.clone()).as_vec(),
                );
                let g = (y * r).sum().backward();
                let gg = (gy * gr).sum().backward();
                cmp("grad x", &g.get(&x).as_vec(), &gg.get(&gx).as_vec());
            }
            // Const batch.
            let x: Tensor<Rank4<2, $c, $h, $w>, $e, Cpu> = cpu.sample_normal();
            let gx = x.to_device(&cuda);
            cmp(
                "Const batch y",
                &L::default().forward(x).as_vec(),
                &L::default().forward(gx).as_vec(),
            );
        }
    };
}

/// Every geometry of `tests/common/geometries.rs` in f32.
mod in_f32 {
    use super::*;
    conv_geometries!(conv_cuda_vs_cpu, f32);
    pool_geometries!(pool_cuda_vs_cpu, f32);
}

/// Every geometry of `tests/common/geometries.rs` in f64.
mod in_f64 {
    use super::*;
    conv_geometries!(conv_cuda_vs_cpu, f64);
    pool_geometries!(pool_cuda_vs_cpu, f64);
}
