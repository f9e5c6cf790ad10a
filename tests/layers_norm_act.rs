//! `#[compact]`'s `BatchNorm`, `LayerNorm` and activations against Flax
//! linen on `Cpu`: every case of `tests/fixtures/flax_norm_act.json`
//! through DSL models (see `tests/common/norm_act.rs` for what is checked
//! and the tolerances), plus BatchNorm with a `usize` batch and with an
//! optimizer, and `Dropout`'s semantics. `tests/layers_gradcheck.rs` checks BatchNorm's training-mode
//! gradients against finite differences.

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/norm_act.rs"]
mod norm_act;

use flaxen::prelude::*;
use norm_act::{assert_flax, Bn2};

#[test]
fn norm_and_activations_match_flax_f64() {
    norm_act::all_cases!(&Cpu::default(), f64);
}

#[test]
fn norm_and_activations_match_flax_f32() {
    norm_act::all_cases!(&Cpu::default(), f32);
}

/// A `usize` batch trains the same as a `Const` one.
#[test]
fn batch_norm_runtime_batch() {
    let f = norm_act::fixture();
    let case = &f.batch_norm[1];
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Bn2, f64>();
    let bn = &mut m.batch_norm_0;
    bn.scale.copy_from(&case.scale.data);
    bn.bias.copy_from(&case.bias.data);
    bn.running_mean.copy_from(&case.running_mean.data);
    bn.running_var.copy_from(&case.running_var.data);
    let x: Tensor<(usize, Const<4>, Const<5>, Const<6>), f64, Cpu> =
        dev.tensor_from_vec(case.x.data.clone(), (3, Const, Const, Const));
    let y = m.forward_mut(x.leaky_trace());
    assert_flax("usize y", &y.as_vec(), &case.train.y);
    assert_flax(
        "usize running_var",
        &m.batch_norm_0.running_var.as_vec(),
        &case.train.running_var,
    );
}

/// The running statistics are state, not parameters: not counted, and an
/// optimizer step leaves them as training left them.
#[test]
fn batch_norm_statistics_are_not_parameters() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Bn2, f32>();
    assert_eq!(m.num_trainable_params(), 2 * 4);
    let mut state = TrainState::create(m, sgd(0.1, None, false)).unwrap();
    let x: Tensor<Rank4<3, 4, 5, 6>, f32, Cpu> = dev.sample_normal();
    let (_, grads) = state
        .value_and_grad(|m, tape| m.forward_mut(x.clone().put_tape(tape)).square().mean())
        .unwrap();
    let trained = state.params.batch_norm_0.running_mean.as_vec();
    assert!(trained.iter().any(|v| *v != 0.0), "training moved the mean");
    state.apply_gradients(grads).unwrap();
    assert_eq!(state.params.batch_norm_0.running_mean.as_vec(), trained);
}

/// `Dropout(0.25)` alone.
pub struct Drop;

#[compact]
impl Drop {
    fn forward(x: Input<1000>) {
        Dropout(0.25)(x)
    }
}

/// Flax's `Dropout` semantics (no fixture: the random masks differ): in
/// training each element is zeroed with probability `rate` and the others
/// are divided by `1 - rate`, and the gradient goes through the same mask;
/// in inference it is the identity.
#[test]
fn dropout_matches_flax_semantics() {
    let dev = Cpu::seed_from_u64(7);
    let mut m = dev.build_module::<Drop, f64>();
    let x: Tensor<Rank2<8, 1000>, f64, _> = dev.sample_uniform() + 0.5;
    assert_eq!(m.forward(x.clone()).as_vec(), x.as_vec());

    let y = m.forward_mut(x.leaky_trace());
    let (xs, ys) = (x.as_vec(), y.as_vec());
    let grads = y.sum().backward();
    let gs = grads.get(&x).as_vec();
    let mut dropped = 0;
    for ((x, y), g) in xs.iter().zip(&ys).zip(&gs) {
        if *y == 0.0 {
            dropped += 1;
            assert_eq!(*g, 0.0, "a dropped element gets no gradient");
        } else {
            assert!((y - x / 0.75).abs() <= 1e-12, "kept {x} -> {y}");
            assert!((g - 1.0 / 0.75).abs() <= 1e-12, "kept gradient {g}");
        }
    }
    // 8000 Bernoulli(0.25) draws: mean 2000, standard deviation about 39.
    assert!(
        (1800..=2200).contains(&dropped),
        "{dropped} of 8000 dropped"
    );
}

/// BatchNorm's running statistics are model state: a checkpoint carries
/// them, and the restored model infers exactly like the trained one.
#[test]
fn batch_norm_statistics_survive_a_checkpoint() {
    use flaxen::runtime::checkpoint::Checkpoint;
    let dev = Cpu::seed_from_u64(5);
    let mut m = dev.build_module::<Bn2, f32>();
    for _ in 0..3 {
        let x: Tensor<Rank4<3, 4, 5, 6>, f32, Cpu> = dev.sample_normal();
        let _ = m.forward_mut((x * 2.0 + 1.0).leaky_trace());
    }
    let mut ckpt = Checkpoint::new(3);
    ckpt.add_module("params", &m).unwrap();
    let keys: Vec<&str> = ckpt.keys().collect();
    assert!(
        keys.contains(&"params.batch_norm_0.running_var"),
        "{keys:?}"
    );

    let dir = std::env::temp_dir().join(format!("flaxen-bn-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bn.safetensors");
    ckpt.save(&path).unwrap();
    let mut fresh = dev.build_module::<Bn2, f32>();
    Checkpoint::load(&path)
        .unwrap()
        .restore()
        .module("params", &mut fresh)
        .apply()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let (a, b) = (&m.batch_norm_0, &fresh.batch_norm_0);
    assert_eq!(a.running_mean.as_vec(), b.running_mean.as_vec());
    assert_eq!(a.running_var.as_vec(), b.running_var.as_vec());
    assert_ne!(b.running_var.as_vec(), vec![1.0; 4], "training moved them");
    let x: Tensor<Rank4<2, 4, 5, 6>, f32, Cpu> = dev.sample_normal();
    assert_eq!(m.forward(x.clone()).as_vec(), fresh.forward(x).as_vec());
}
