//! Smoke test of dfdx's `Cuda` device as flaxen builds it (`--features cuda`).
//!
//! Each test computes the same thing on `Cpu` and on `Cuda` from the same
//! parameters and inputs and compares the results. Tolerance: the absolute
//! difference of every value is at most `ATOL + RTOL * |cpu value|`, with
//! `ATOL = 1e-5` and `RTOL = 1e-4` (f32; cuBLAS sums in another order than
//! the CPU gemm, and Adam divides by `sqrt(v) + eps`, so bit equality is not
//! expected). Pure data movement (permute + reshape, stack, concat) must be
//! exact.
//!
//! Without a GPU this file still has to compile and link: see docs/cuda.md
//! for building it on a machine without CUDA and running it on a lent GPU.
#![cfg(feature = "cuda")]

use flaxen::dfdx::nn::builders::{Linear, ReLU};
use flaxen::dfdx::nn::ToDevice;
use flaxen::dfdx::optim::{Adam, AdamConfig, Optimizer};
use flaxen::dfdx::tensor_ops::{RealizeTo, TryConcatAlong, TryStack};
use flaxen::prelude::*;

#[path = "common/cuda.rs"]
mod cuda_common;
use cuda_common::assert_close;

type Model = (Linear<6, 16>, ReLU, Linear<16, 3>);

/// All parameters of the model, in `TensorCollection` order, as one vector.
fn flat_params<D: Device<f32>>(m: &<Model as BuildOnDevice<D, f32>>::Built) -> Vec<f32> {
    let (l0, _, l2) = m;
    [
        l0.weight.as_vec(),
        l0.bias.as_vec(),
        l2.weight.as_vec(),
        l2.bias.as_vec(),
    ]
    .concat()
}

/// The gradients of the cross-entropy loss with respect to every parameter.
fn grads_of<D: Device<f32>>(
    dev: &D,
    model: &<Model as BuildOnDevice<D, f32>>::Built,
    x: &Tensor<Rank2<8, 6>, f32, Cpu>,
    y: &Tensor<Rank1<8>, usize, Cpu>,
) -> Vec<f32> {
    let logits = model.forward(x.to_device(dev).trace(model.alloc_grads()));
    let loss = -logits
        .log_softmax::<Axis<1>>()
        .select(y.to_device(dev))
        .mean();
    let g = loss.backward();
    let (l0, _, l2) = model;
    [
        g.get(&l0.weight).as_vec(),
        g.get(&l0.bias).as_vec(),
        g.get(&l2.weight).as_vec(),
        g.get(&l2.bias).as_vec(),
    ]
    .concat()
}

/// `steps` Adam steps of a cross-entropy loss; returns the losses.
///
/// `eps = 1e-6` rather than Adam's 1e-8: the first steps move each parameter
/// by about `lr * g / (|g| + eps)`, which for a gradient component near zero
/// turns a rounding difference between cuBLAS and the CPU gemm into a large
/// step; 1e-6 keeps that amplification inside the tolerance.
fn train<D: Device<f32>>(
    dev: &D,
    model: &mut <Model as BuildOnDevice<D, f32>>::Built,
    x: &Tensor<Rank2<8, 6>, f32, Cpu>,
    y: &Tensor<Rank1<8>, usize, Cpu>,
    steps: usize,
) -> Vec<f32> {
    let mut opt = Adam::new(
        &*model,
        AdamConfig {
            lr: 1e-2,
            eps: 1e-6,
            ..Default::default()
        },
    );
    let x = x.to_device(dev);
    let y = y.to_device(dev);
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        let logits = model.forward(x.trace(model.alloc_grads()));
        let loss = -logits.log_softmax::<Axis<1>>().select(y.clone()).mean();
        losses.push(loss.as_vec()[0]);
        let grads = loss.backward();
        opt.update(model, &grads)
            .expect("every parameter has a gradient");
    }
    losses
}

#[test]
fn mlp_forward_backward_adam_matches_cpu() {
    let cpu = Cpu::seed_from_u64(7);
    let cuda = Cuda::seed_from_u64(7);

    let mut cpu_model = cpu.build_module::<Model, f32>();
    let mut cuda_model = cpu_model.to_device(&cuda);
    assert_close(
        "initial params",
        &flat_params::<Cpu>(&cpu_model),
        &flat_params::<Cuda>(&cuda_model),
    );

    let x: Tensor<Rank2<8, 6>, f32, Cpu> = cpu.sample_normal();
    let y: Tensor<Rank1<8>, usize, Cpu> = cpu.tensor([0, 1, 2, 0, 1, 2, 0, 1]);

    // forward only
    let cpu_logits = cpu_model.forward(x.clone());
    let cuda_logits = cuda_model.forward(x.to_device(&cuda));
    assert_close("logits", &cpu_logits.as_vec(), &cuda_logits.as_vec());

    // backward
    assert_close(
        "gradients",
        &grads_of(&cpu, &cpu_model, &x, &y),
        &grads_of(&cuda, &cuda_model, &x, &y),
    );

    // forward + backward + Adam, a few steps
    let cpu_losses = train(&cpu, &mut cpu_model, &x, &y, 5);
    let cuda_losses = train(&cuda, &mut cuda_model, &x, &y, 5);
    assert_close("losses", &cpu_losses, &cuda_losses);
    assert!(
        cuda_losses[4] < cuda_losses[0],
        "loss should fall: {cuda_losses:?}"
    );
    assert_close(
        "params after 5 Adam steps",
        &flat_params::<Cpu>(&cpu_model),
        &flat_params::<Cuda>(&cuda_model),
    );
}

/// dfdx compiles these kernels with nvrtc at run time (reshape of a
/// non-contiguous tensor, stack, concat), with include paths fixed at build
/// time: this is what breaks first when a cross-built binary runs elsewhere.
#[test]
fn nvrtc_compiled_kernels_match_cpu() {
    let cpu = Cpu::default();
    let cuda = Cuda::default();
    let a: Tensor<Rank3<2, 3, 4>, f32, Cpu> = cpu.sample_normal();
    let b: Tensor<Rank3<2, 3, 4>, f32, Cpu> = cpu.sample_normal();
    let (ga, gb) = (a.to_device(&cuda), b.to_device(&cuda));

    let cpu_r = a
        .clone()
        .permute::<Rank3<4, 2, 3>, _>()
        .reshape::<Rank2<4, 6>>();
    let cuda_r = ga
        .clone()
        .permute::<Rank3<4, 2, 3>, _>()
        .reshape::<Rank2<4, 6>>();
    assert_eq!(cpu_r.as_vec(), cuda_r.as_vec(), "permute + reshape");

    let cpu_s = [a.clone(), b.clone()].stack();
    let cuda_s = [ga.clone(), gb.clone()].stack();
    assert_eq!(cpu_s.as_vec(), cuda_s.as_vec(), "stack");

    // stable Rust concatenates along a `usize` axis
    type Dyn = (Const<2>, usize, Const<4>);
    let cpu_c = (a.realize::<Dyn>(), b.realize::<Dyn>()).concat_along(Axis::<1>);
    let cuda_c = (ga.realize::<Dyn>(), gb.realize::<Dyn>()).concat_along(Axis::<1>);
    assert_eq!(cuda_c.shape().1, 6);
    assert_eq!(cpu_c.as_vec(), cuda_c.as_vec(), "concat_along");
}

/// The backward kernels that dfdx compiles with nvrtc: reshape of a
/// non-contiguous tensor and stack.
#[test]
fn nvrtc_compiled_backward_kernels_match_cpu() {
    fn grads<D: Device<f32>>(
        dev: &D,
        a: &Tensor<Rank3<2, 3, 4>, f32, Cpu>,
        w: &Tensor<Rank3<2, 4, 6>, f32, Cpu>,
    ) -> Vec<f32> {
        let a = a.to_device(dev);
        let w = w.to_device(dev);
        let t = a.leaky_trace();
        let r = t
            .with_empty_tape()
            .permute::<Rank3<4, 2, 3>, _>()
            .reshape::<Rank2<4, 6>>();
        let s = [
            r,
            t.permute::<Rank3<4, 2, 3>, _>().reshape::<Rank2<4, 6>>() * 2.0,
        ]
        .stack();
        let g = (s * w).sum().backward();
        g.get(&a).as_vec()
    }
    let cpu = Cpu::default();
    let cuda = Cuda::default();
    let a: Tensor<Rank3<2, 3, 4>, f32, Cpu> = cpu.sample_normal();
    let w: Tensor<Rank3<2, 4, 6>, f32, Cpu> = cpu.sample_normal();
    assert_close(
        "grad through permute + reshape + stack",
        &grads(&cpu, &a, &w),
        &grads(&cuda, &a, &w),
    );
}

/// f32 -> f16 -> f32 goes through an nvrtc kernel that includes cuda_fp16.h.
#[cfg(feature = "f16")]
#[test]
fn f16_round_trip_matches_cpu() {
    use flaxen::dfdx::dtypes::f16;
    let cpu = Cpu::default();
    let cuda = Cuda::default();
    let a: Tensor<Rank2<4, 5>, f32, Cpu> = cpu.sample_normal();
    let cpu_h = a.clone().to_dtype::<f16>().to_dtype::<f32>();
    let cuda_h = a.to_device(&cuda).to_dtype::<f16>().to_dtype::<f32>();
    assert_eq!(cpu_h.as_vec(), cuda_h.as_vec(), "f16 round trip");
}
