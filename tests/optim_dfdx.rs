//! flaxen's optimizers against dfdx's own where the configurations coincide.
//!
//! Both `adam`s put `eps` outside the square root (Optax's and dfdx's
//! convention; PyTorch's too). With `pytorch_arithmetic(true)` flaxen runs
//! dfdx's fused Adam kernel (by default it rounds Adam's constants as Optax,
//! see `tests/optim_optax_exact.rs`), so the
//! parameters come out bit-for-bit equal: flaxen computes the update
//! `u = 0 - lr * step` and adds it, dfdx subtracts `lr * step` directly, and
//! `p + (0 - x) == p - x` exactly in IEEE arithmetic.

use flaxen::runtime::dfdx::optim::{Adam, Momentum as DfdxMomentum, Optimizer, Sgd, SgdConfig};
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;

type Mlp = (Linear<5, 16>, Tanh, Linear<16, 3>);

fn loss_grads<
    M: Module<
            Tensor<Rank2<8, 5>, f32, Cpu, OwnedTape<f32, Cpu>>,
            Output = Tensor<Rank2<8, 3>, f32, Cpu, OwnedTape<f32, Cpu>>,
        > + ZeroGrads<f32, Cpu>,
>(
    model: &M,
    x: &Tensor<Rank2<8, 5>, f32, Cpu>,
) -> Gradients<f32, Cpu> {
    model
        .forward(x.clone().traced(model.alloc_grads()))
        .square()
        .mean()
        .backward()
}

#[test]
fn adam_equals_dfdx_adam() {
    adam_equals_dfdx_adam_on_path(false);
    adam_equals_dfdx_adam_on_path(true);
}

/// `fused`: `apply_model` (what `TrainState` runs) instead of
/// `update_model` + `apply_updates`.
fn adam_equals_dfdx_adam_on_path(fused: bool) {
    let dev: Cpu = Cpu::seed_from_u64(3);
    let mut ours = dev.build_module::<Mlp, f32>();
    let mut theirs = ours.clone();
    let tx = adam(3e-2)
        .b1(0.8)
        .b2(0.99)
        .eps(1e-7)
        .pytorch_arithmetic(true);
    let mut state = tx.init_model(&ours).unwrap();
    let mut opt = Adam::new(
        &theirs,
        AdamConfig {
            lr: 3e-2,
            betas: [0.8, 0.99],
            eps: 1e-7,
            weight_decay: None,
        },
    );
    for _ in 0..20 {
        let x: Tensor<Rank2<8, 5>, f32, Cpu> = dev.sample_normal();
        let g1 = loss_grads(&ours, &x);
        let g2 = loss_grads(&theirs, &x);
        if fused {
            tx.apply_model(&mut state, g1, &mut ours).unwrap();
        } else {
            let updates = tx.update_model(&mut state, g1, &ours).unwrap();
            apply_updates(&mut ours, updates).unwrap();
        }
        opt.update(&mut theirs, &g2).unwrap();
        assert_eq!(ours.0.weight.as_vec(), theirs.0.weight.as_vec());
        assert_eq!(ours.2.bias.as_vec(), theirs.2.bias.as_vec());
    }
}

#[test]
fn sgd_nesterov_equals_dfdx_sgd() {
    let dev: Cpu = Cpu::seed_from_u64(4);
    let mut ours = dev.build_module::<Mlp, f32>();
    let mut theirs = ours.clone();
    let tx = sgd(0.05, Some(0.9), true);
    let mut state = tx.init_model(&ours).unwrap();
    let mut opt = Sgd::new(
        &theirs,
        SgdConfig {
            lr: 0.05,
            momentum: Some(DfdxMomentum::Nesterov(0.9)),
            weight_decay: None,
        },
    );
    for _ in 0..20 {
        let x: Tensor<Rank2<8, 5>, f32, Cpu> = dev.sample_normal();
        let g1 = loss_grads(&ours, &x);
        let g2 = loss_grads(&theirs, &x);
        let updates = tx.update_model(&mut state, g1, &ours).unwrap();
        apply_updates(&mut ours, updates).unwrap();
        opt.update(&mut theirs, &g2).unwrap();
        assert_eq!(ours.0.weight.as_vec(), theirs.0.weight.as_vec());
    }
}
