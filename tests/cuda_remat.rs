//! `remat(Block())(x)` on dfdx's `Cuda` device: the residual network of
//! `tests/remat.rs` (convolutions, BatchNorm), its parameters built on Cpu
//! and moved with `to_device`, trained one step on the same batch with
//! and without `remat`.
//!
//! On the GPU the two are held to the Cuda tolerance of
//! `tests/common/cuda.rs` rather than to bit-for-bit equality: dfdx's Cuda
//! reductions need not sum in the same order twice. Each is also held to
//! the plain network on Cpu. Without a GPU this file still has to compile:
//! see docs/cuda.md.
#![cfg(feature = "cuda")]

#[path = "common/cuda.rs"]
mod cuda_common;
#[path = "common/remat.rs"]
mod remat_common;

use cuda_common::assert_close;
use flaxen::dfdx::nn::ToDevice;
use flaxen::prelude::*;
use flaxen::runtime::checkpoint::load_module_state;
use remat_common::{grads_by_key, state, Checkpointed, Plain};

macro_rules! remat_on_cuda {
    ($e:ty) => {{
        let cpu: Cpu = Cpu::seed_from_u64(9);
        let cuda: Cuda = Default::default();
        let mut plain = cpu.build_module::<Plain, $e>();
        let mut remat = cpu.build_module::<Checkpointed, $e>();
        load_module_state(&mut remat, "", &state(&plain)).unwrap();
        let (mut plain_gpu, mut remat_gpu) = (plain.to_device(&cuda), remat.to_device(&cuda));
        let x: Tensor<Rank4<4, 3, 8, 8>, $e, Cpu> = cpu.sample_normal();
        let xg = x.to_device(&cuda);

        let want = plain.forward_mut(x.leaky_trace()).square().sum().backward();
        let want = (grads_by_key(&plain, &want), want.get(&x).as_vec());
        let g1 = plain_gpu
            .forward_mut(xg.leaky_trace())
            .square()
            .sum()
            .backward();
        let g2 = remat_gpu
            .forward_mut(xg.leaky_trace())
            .square()
            .sum()
            .backward();
        for (name, g, m) in [
            ("plain", &g1, grads_by_key(&plain_gpu, &g1)),
            ("remat", &g2, grads_by_key(&remat_gpu, &g2)),
        ] {
            assert_eq!(
                m.keys().collect::<Vec<_>>(),
                want.0.keys().collect::<Vec<_>>()
            );
            for (k, v) in &m {
                assert_close(&format!("{name} {k}"), &want.0[k], v);
            }
            assert_close(&format!("{name} input"), &want.1, &g.get(&xg).as_vec());
        }
        // BatchNorm's statistics moved once on the GPU too.
        let (s, r) = (state(&plain), state(&remat_gpu));
        for (k, v) in &s {
            assert_close(&format!("state {k}"), &v.data, &r[k].data);
        }
    }};
}

#[test]
fn cuda_remat_matches_plain_f32() {
    remat_on_cuda!(f32);
}

#[test]
fn cuda_remat_matches_plain_f64() {
    remat_on_cuda!(f64);
}
