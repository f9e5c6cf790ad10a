//! The optimizers are chains of Optax's primitives: each named optimizer
//! gives, bit for bit, what the same primitives give composed one by one
//! with `chain` (each with its own state, no fused kernel), on both ways of
//! applying it; and states that flaxen saved before its optimizers were
//! built from primitives load and resume bit for bit, under the same keys
//! and shapes.

mod common;

use common::{grads_of, Wb};
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::cosine_decay;
use flaxen::runtime::state::{HostTensor, StateDict, StateMap};

fn model(dev: &Cpu) -> Wb<f32, Cpu> {
    Wb {
        w: dev.tensor_from_vec(
            (0..12).map(|i| (i as f32 * 0.37).sin()).collect(),
            (Const::<3>, Const::<4>),
        ),
        b: dev.tensor_from_vec(vec![0.5, -0.25, 0.0, 1.5], (Const::<4>,)),
    }
}

/// Large, uneven gradients, different at every step.
fn grads(m: &Wb<f32, Cpu>, k: usize) -> Gradients<f32, Cpu> {
    let gw: Vec<f32> = (0..12)
        .map(|i| (((i * 7 + k * 3) % 5) as f32 - 2.0) * 0.7)
        .collect();
    let gb: Vec<f32> = (0..4).map(|i| ((i + k) % 3) as f32 - 1.3).collect();
    grads_of(m, &gw, &gb)
}

/// The parameters after steps `from..to`, applied in place or in two steps.
fn run<T: GradientTransformation<f32, Cpu>>(
    tx: &T,
    state: &mut T::State,
    m: &mut Wb<f32, Cpu>,
    steps: std::ops::Range<usize>,
    in_place: bool,
) -> (Vec<f32>, Vec<f32>) {
    for k in steps {
        let g = grads(m, k);
        if in_place {
            tx.apply_model(state, g, m).unwrap();
        } else {
            let u = tx.update_model(state, g, m).unwrap();
            apply_updates(m, u).unwrap();
        }
    }
    (m.w.as_vec(), m.b.as_vec())
}

fn trajectory<T: GradientTransformation<f32, Cpu>>(tx: &T, in_place: bool) -> (Vec<f32>, Vec<f32>) {
    let dev: Cpu = Default::default();
    let mut m = model(&dev);
    let mut s = tx.init_model(&m).unwrap();
    run(tx, &mut s, &mut m, 0..7, in_place)
}

fn same_as_primitives<A, C>(name: &str, alias: A, primitives: C)
where
    A: GradientTransformation<f32, Cpu>,
    C: GradientTransformation<f32, Cpu>,
{
    let want = trajectory(&primitives, false);
    assert_ne!(
        want.0,
        model(&Default::default()).w.as_vec(),
        "{name} moved"
    );
    assert_eq!(
        trajectory(&alias, true),
        want,
        "{name}, fused (apply_model)"
    );
    assert_eq!(trajectory(&alias, false), want, "{name}, two steps");
}

#[test]
fn each_optimizer_is_its_primitives_bit_for_bit() {
    let lr = || cosine_decay(0.3, 5, 0.1);
    same_as_primitives(
        "adam",
        adam(lr()),
        chain((scale_by_adam(), scale_by_learning_rate(lr()))),
    );
    same_as_primitives(
        "adamw",
        adamw(0.2, 0.05).b1(0.8).eps(1e-3),
        chain((
            scale_by_adam().b1(0.8).eps(1e-3),
            add_decayed_weights(0.05),
            scale_by_learning_rate(0.2),
        )),
    );
    same_as_primitives(
        "adamw masked",
        adamw(0.2, 0.05).mask(|k: &str| k == "w"),
        chain((
            scale_by_adam(),
            add_decayed_weights(0.05).mask(|k: &str| k == "w"),
            scale_by_learning_rate(0.2),
        )),
    );
    same_as_primitives(
        "sgd",
        sgd(lr(), None, false),
        chain((scale_by_learning_rate(lr()),)),
    );
    same_as_primitives(
        "sgd nesterov",
        sgd(0.4, Some(0.9), true),
        chain((trace(0.9, true), scale_by_learning_rate(0.4))),
    );
    same_as_primitives(
        "rmsprop",
        rmsprop(0.05).decay(0.8),
        chain((scale_by_rms().decay(0.8), scale_by_learning_rate(0.05))),
    );
    same_as_primitives(
        "rmsprop centred, nesterov momentum",
        rmsprop(lr()).centered(true).momentum(0.9).nesterov(true),
        chain((
            scale_by_stddev(),
            scale_by_learning_rate(lr()),
            trace(0.9, true),
        )),
    );
    same_as_primitives(
        "adagrad",
        adagrad(0.3),
        chain((scale_by_rss(), scale_by_learning_rate(0.3))),
    );
    same_as_primitives(
        "adabelief",
        adabelief(lr()).nesterov(true),
        chain((
            scale_by_belief().nesterov(true),
            scale_by_learning_rate(lr()),
        )),
    );
    same_as_primitives(
        "lamb",
        lamb(0.3).weight_decay(0.05).eps_root(1e-8),
        chain((
            scale_by_adam().eps(1e-6).eps_root(1e-8),
            add_decayed_weights(0.05),
            scale_by_trust_ratio(),
            scale_by_learning_rate(0.3),
        )),
    );
    same_as_primitives(
        "lion",
        lion(0.1),
        chain((
            scale_by_lion(),
            add_decayed_weights(1e-3),
            scale_by_learning_rate(0.1),
        )),
    );
    same_as_primitives(
        "adafactor",
        adafactor(lr()).min_dim_size_to_factor(2),
        chain((
            scale_by_factored_rms().min_dim_size_to_factor(2),
            clip_by_block_rms(1.0),
            scale_by_learning_rate(lr()).flip_sign(false),
            scale_by_param_block_rms(),
            scale(-1.0),
        )),
    );
}

#[derive(serde::Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    state: std::collections::BTreeMap<String, Saved>,
    w_at_save: Vec<f32>,
    b_at_save: Vec<f32>,
    w_after: Vec<f32>,
    b_after: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Saved {
    shape: Vec<usize>,
    data: Vec<f32>,
}

/// Loads `case`'s old state into a fresh one of `tx`, checks that `tx`
/// saves the same keys and shapes, and resumes the old run.
fn resume<T: GradientTransformation<f32, Cpu>>(case: &Case, tx: T) {
    let dev: Cpu = Default::default();
    let mut m = model(&dev);
    m.w.copy_from(&case.w_at_save);
    m.b.copy_from(&case.b_at_save);
    let mut s = tx.init_model(&m).unwrap();
    let old: StateMap<f32> = case
        .state
        .iter()
        .map(|(k, t)| {
            let t = HostTensor {
                shape: t.shape.clone(),
                data: t.data.clone(),
            };
            (k.clone(), t)
        })
        .collect();
    let mut fresh = StateMap::new();
    s.save_state("opt.", &mut fresh);
    let shapes = |m: &StateMap<f32>| -> Vec<(String, Vec<usize>)> {
        m.iter()
            .map(|(k, t)| (k.clone(), t.shape.clone()))
            .collect()
    };
    assert_eq!(
        shapes(&fresh),
        shapes(&old),
        "{}: keys and shapes",
        case.name
    );
    s.load_state("opt.", &old).unwrap();
    let got = run(&tx, &mut s, &mut m, 4..8, true);
    assert_eq!(
        got,
        (case.w_after.clone(), case.b_after.clone()),
        "{}",
        case.name
    );
}

#[test]
fn states_saved_before_the_primitives_load_and_resume() {
    let fixture: Fixture =
        serde_json::from_str(include_str!("fixtures/optim_states_v1.json")).unwrap();
    let names: Vec<&str> = fixture.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), 12, "{names:?}");
    for case in &fixture.cases {
        match case.name.as_str() {
            "sgd" => resume(case, sgd(0.1, None, false)),
            "sgd_nesterov" => resume(case, sgd(0.1, Some(0.9), true)),
            "rmsprop" => resume(case, rmsprop(1e-2)),
            "rmsprop_centered_momentum" => resume(case, rmsprop(1e-2).centered(true).momentum(0.9)),
            "adam" => resume(case, adam(0.3)),
            "adamw" => resume(case, adamw(0.1, 1e-2)),
            "adagrad" => resume(case, adagrad(0.1)),
            "adabelief" => resume(case, adabelief(0.1)),
            "lamb" => resume(case, lamb(0.1).weight_decay(1e-2)),
            "lion" => resume(case, lion(0.05)),
            "adafactor" => resume(case, adafactor(0.1).min_dim_size_to_factor(2)),
            "chain_clip_adam" => resume(case, chain((clip_by_global_norm(1.0), adam(0.1)))),
            other => panic!("unknown case {other}"),
        }
    }
}
