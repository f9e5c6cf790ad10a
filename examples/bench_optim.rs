//! One optimizer update on the seed CNN's 824,458 parameters: flaxen `adam`
//! (Optax's arithmetic, and `pytorch_arithmetic(true)`, i.e. dfdx's kernel)
//! versus dfdx's `Adam`, `rmsprop` with Optax's `centered`, `momentum`
//! and `nesterov`, `apply_if_finite(adam)`, `adagrad`, `lion`, `adabelief`,
//! `lamb` (with a masked weight decay), `adafactor` (Optax's defaults:
//! `dense_0.kernel`'s second moment factored) and Optax's masked-decay idiom
//! `chain((masked(add_decayed_weights), adam))`. Prints one JSON line.
//!
//! The parameters are raw tensors with the seed CNN's shapes (conv 1→32 3x3,
//! conv 32→64 3x3, dense 3136→256, dense 256→10): an optimizer only sees
//! tensors, so this is the same work as on the real model.
//!
//! `cargo run --release --example bench_optim [iterations]`; glibc's malloc
//! keeps freed memory (`keep_freed_memory`), as in the training examples.

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::optim::{Adam, Optimizer};
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::{
    adabelief, adafactor, adagrad, adam, add_decayed_weights, apply_if_finite, apply_updates,
    chain, decay_mask, lamb, lion, masked, rmsprop, GradientTransformation,
};
use std::time::Instant;

#[derive(Debug, Clone)]
struct SeedCnnParams<E: Dtype, D: Storage<E>> {
    conv_0_kernel: Tensor<Rank4<32, 1, 3, 3>, E, D>,
    conv_0_bias: Tensor<Rank1<32>, E, D>,
    conv_1_kernel: Tensor<Rank4<64, 32, 3, 3>, E, D>,
    conv_1_bias: Tensor<Rank1<64>, E, D>,
    dense_0_kernel: Tensor<Rank2<3136, 256>, E, D>,
    dense_0_bias: Tensor<Rank1<256>, E, D>,
    dense_1_kernel: Tensor<Rank2<256, 10>, E, D>,
    dense_1_bias: Tensor<Rank1<10>, E, D>,
}

impl<E: Dtype, D: Device<E>> TensorCollection<E, D> for SeedCnnParams<E, D> {
    type To<E2: Dtype, D2: Device<E2>> = SeedCnnParams<E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                (
                    Self::tensor(
                        "conv_0.kernel",
                        |s| &s.conv_0_kernel,
                        |s| &mut s.conv_0_kernel,
                        TensorOptions::reset_to_zeros(),
                    ),
                    Self::tensor(
                        "conv_0.bias",
                        |s| &s.conv_0_bias,
                        |s| &mut s.conv_0_bias,
                        TensorOptions::reset_to_zeros(),
                    ),
                    Self::tensor(
                        "conv_1.kernel",
                        |s| &s.conv_1_kernel,
                        |s| &mut s.conv_1_kernel,
                        TensorOptions::reset_to_zeros(),
                    ),
                    Self::tensor(
                        "conv_1.bias",
                        |s| &s.conv_1_bias,
                        |s| &mut s.conv_1_bias,
                        TensorOptions::reset_to_zeros(),
                    ),
                ),
                (
                    Self::tensor(
                        "dense_0.kernel",
                        |s| &s.dense_0_kernel,
                        |s| &mut s.dense_0_kernel,
                        TensorOptions::reset_to_zeros(),
                    ),
                    Self::tensor(
                        "dense_0.bias",
                        |s| &s.dense_0_bias,
                        |s| &mut s.dense_0_bias,
                        TensorOptions::reset_to_zeros(),
                    ),
                    Self::tensor(
                        "dense_1.kernel",
                        |s| &s.dense_1_kernel,
                        |s| &mut s.dense_1_kernel,
                        TensorOptions::reset_to_zeros(),
                    ),
                    Self::tensor(
                        "dense_1.bias",
                        |s| &s.dense_1_bias,
                        |s| &mut s.dense_1_bias,
                        TensorOptions::reset_to_zeros(),
                    ),
                ),
            ),
            |((a, b, c, d), (e, f, g, h))| SeedCnnParams {
                conv_0_kernel: a,
                conv_0_bias: b,
                conv_1_kernel: c,
                conv_1_bias: d,
                dense_0_kernel: e,
                dense_0_bias: f,
                dense_1_kernel: g,
                dense_1_bias: h,
            },
        )
    }
}

/// Gradients equal to random normal values, written by backward passes.
fn random_grads(m: &SeedCnnParams<f32, Cpu>, dev: &Cpu) -> Gradients<f32, Cpu> {
    fn add<S: ConstShape>(
        t: &Tensor<S, f32, Cpu>,
        g: Gradients<f32, Cpu>,
        dev: &Cpu,
    ) -> Gradients<f32, Cpu> {
        let r: Tensor<S, f32, Cpu> = dev.sample_normal();
        (t.clone().traced(g) * r).sum().backward()
    }
    let mut g = m.alloc_grads();
    g = add(&m.conv_0_kernel, g, dev);
    g = add(&m.conv_0_bias, g, dev);
    g = add(&m.conv_1_kernel, g, dev);
    g = add(&m.conv_1_bias, g, dev);
    g = add(&m.dense_0_kernel, g, dev);
    g = add(&m.dense_0_bias, g, dev);
    g = add(&m.dense_1_kernel, g, dev);
    add(&m.dense_1_bias, g, dev)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // As every training program here does: with glibc's default dynamic
    // mmap threshold, an optimizer's timing depends on what the benchmarks
    // before it allocated (adabelief measured 1.5x apart in two builds whose
    // only difference was another optimizer's allocations).
    flaxen::runtime::malloc::keep_freed_memory();
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let dev: Cpu = Cpu::seed_from_u64(0);
    let mut ours = SeedCnnParams {
        conv_0_kernel: dev.sample_normal(),
        conv_0_bias: dev.sample_normal(),
        conv_1_kernel: dev.sample_normal(),
        conv_1_bias: dev.sample_normal(),
        dense_0_kernel: dev.sample_normal(),
        dense_0_bias: dev.sample_normal(),
        dense_1_kernel: dev.sample_normal(),
        dense_1_bias: dev.sample_normal(),
    };
    let n = ours.num_trainable_params();
    assert_eq!(n, 824_458);
    let mut theirs = ours.clone();
    let mut two_step = ours.clone();
    let mut pytorch = ours.clone();
    let mut rms = ours.clone();
    let mut finite = ours.clone();
    let mut ada = ours.clone();
    let mut li = ours.clone();
    let mut belief = ours.clone();
    let mut la = ours.clone();
    let mut md = ours.clone();
    let mut af = ours.clone();
    let mut grads = random_grads(&ours, &dev);
    let mut grads_two = random_grads(&two_step, &dev);
    let grads_theirs = random_grads(&theirs, &dev);
    let mut grads_pt = random_grads(&pytorch, &dev);
    let mut grads_rms = random_grads(&rms, &dev);
    let mut grads_fin = random_grads(&finite, &dev);
    let mut grads_ada = random_grads(&ada, &dev);
    let mut grads_li = random_grads(&li, &dev);
    let mut grads_belief = random_grads(&belief, &dev);
    let mut grads_la = random_grads(&la, &dev);
    let mut grads_md = random_grads(&md, &dev);
    let mut grads_af = random_grads(&af, &dev);

    let tx = adam(1e-3);
    let mut state = tx.init_model(&ours).unwrap();
    let mut state_two = tx.init_model(&two_step).unwrap();
    let tx_pt = adam(1e-3).pytorch_arithmetic(true);
    let mut state_pt = tx_pt.init_model(&pytorch).unwrap();
    let tx_rms = rmsprop(1e-3).centered(true).momentum(0.9).nesterov(true);
    let mut state_rms = tx_rms.init_model(&rms).unwrap();
    let tx_fin = apply_if_finite(adam(1e-3), 5);
    let mut state_fin = tx_fin.init_model(&finite).unwrap();
    let tx_ada = adagrad(1e-2);
    let mut state_ada = tx_ada.init_model(&ada).unwrap();
    let tx_li = lion(1e-4);
    let mut state_li = tx_li.init_model(&li).unwrap();
    let tx_belief = adabelief(1e-3);
    let mut state_belief = tx_belief.init_model(&belief).unwrap();
    let tx_la = lamb(1e-3).weight_decay(1e-2).mask(decay_mask);
    let mut state_la = tx_la.try_init_model(&la).unwrap();
    let tx_md = chain((masked(add_decayed_weights(1e-4), decay_mask), adam(1e-3)));
    let mut state_md = tx_md.try_init_model(&md).unwrap();
    let tx_af = adafactor(1e-2);
    let mut state_af = tx_af.init_model(&af).unwrap();
    let mut opt = Adam::new(&theirs, AdamConfig::default());

    let (mut t_ours, mut t_theirs, mut t_two) = (Vec::new(), Vec::new(), Vec::new());
    let (mut t_pt, mut t_rms, mut t_fin) = (Vec::new(), Vec::new(), Vec::new());
    let (mut t_ada, mut t_li) = (Vec::new(), Vec::new());
    let (mut t_belief, mut t_la, mut t_md) = (Vec::new(), Vec::new(), Vec::new());
    let mut t_af = Vec::new();
    for i in 0..iters + 3 {
        // Interleaved, so that all three see the same machine load.
        // flaxen as TrainState runs it: apply_model (fused, in place).
        let t = Instant::now();
        grads = tx.apply_model(&mut state, grads, &mut ours).unwrap();
        let a = t.elapsed().as_secs_f64();
        let t = Instant::now();
        opt.update(&mut theirs, &grads_theirs).unwrap();
        let b = t.elapsed().as_secs_f64();
        // flaxen's composable path: updates as tensors, then params += updates.
        let t = Instant::now();
        let updates = tx
            .update_model(&mut state_two, grads_two, &two_step)
            .unwrap();
        grads_two = apply_updates(&mut two_step, updates).unwrap();
        let c = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_pt = tx_pt
            .apply_model(&mut state_pt, grads_pt, &mut pytorch)
            .unwrap();
        let d = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_rms = tx_rms
            .apply_model(&mut state_rms, grads_rms, &mut rms)
            .unwrap();
        let e = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_fin = tx_fin
            .apply_model(&mut state_fin, grads_fin, &mut finite)
            .unwrap();
        let f = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_ada = tx_ada
            .apply_model(&mut state_ada, grads_ada, &mut ada)
            .unwrap();
        let g = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_li = tx_li.apply_model(&mut state_li, grads_li, &mut li).unwrap();
        let h = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_belief = tx_belief
            .apply_model(&mut state_belief, grads_belief, &mut belief)
            .unwrap();
        let j = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_la = tx_la.apply_model(&mut state_la, grads_la, &mut la).unwrap();
        let k = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_md = tx_md.apply_model(&mut state_md, grads_md, &mut md).unwrap();
        let l = t.elapsed().as_secs_f64();
        let t = Instant::now();
        grads_af = tx_af.apply_model(&mut state_af, grads_af, &mut af).unwrap();
        let m = t.elapsed().as_secs_f64();
        if i >= 3 {
            t_af.push(m * 1e3);
            t_belief.push(j * 1e3);
            t_la.push(k * 1e3);
            t_md.push(l * 1e3);
            t_li.push(h * 1e3);
            t_ada.push(g * 1e3);
            t_fin.push(f * 1e3);
            t_rms.push(e * 1e3);
            t_pt.push(d * 1e3);
            t_ours.push(a * 1e3);
            t_theirs.push(b * 1e3);
            t_two.push(c * 1e3);
        }
    }
    let (a, b, c) = (median(t_ours), median(t_theirs), median(t_two));
    let (d, e, f) = (median(t_pt), median(t_rms), median(t_fin));
    let (g, h) = (median(t_ada), median(t_li));
    let (j, k, l) = (median(t_belief), median(t_la), median(t_md));
    let m = median(t_af);
    println!(
        "{{\"bench\":\"optim_update\",\"params\":{n},\"iters\":{iters},\"flaxen_adam_ms\":{a:.3},\"dfdx_adam_ms\":{b:.3},\"ratio\":{:.3},\"flaxen_adam_update_then_apply_ms\":{c:.3},\"ratio_update_then_apply\":{:.3},\"flaxen_adam_pytorch_arithmetic_ms\":{d:.3},\"flaxen_rmsprop_centered_nesterov_ms\":{e:.3},\"flaxen_apply_if_finite_adam_ms\":{f:.3},\"flaxen_adagrad_ms\":{g:.3},\"flaxen_lion_ms\":{h:.3},\"flaxen_adabelief_ms\":{j:.3},\"flaxen_lamb_masked_decay_ms\":{k:.3},\"flaxen_masked_decay_then_adam_ms\":{l:.3},\"flaxen_adafactor_ms\":{m:.3}}}",
        a / b,
        c / b
    );
}
