//! Optax 0.2.8 traces of `lamb` (`tests/fixtures/optax_lamb.json`, written
//! by `tests/python/make_optax_lamb.py`): 12 steps on a tree keyed by
//! checkpoint names (`conv_0.weight` 3x2x3x3, `conv_0.bias` 3,
//! `dense_0.weight` 5x7, `dense_0.bias` 5, `layer_norm_0.scale` 7), with
//! learning rates 0.3, 1e-3 and a cosine schedule, weight decay off, on
//! and masked, and both zero-norm branches of the trust ratio; in `f32`
//! and `f64`, reproduced through both apply paths within 1e-5 (`f32`) and
//! 1e-6 (`f64`) relative, `|got - want| <= rel * max(|want|, 1e-2)`;
//! states that resume bit for bit through a checkpoint.

#[path = "common/fixture.rs"]
mod fixture;

use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;

#[path = "common/optax_tree.rs"]
mod optax_tree;
use optax_tree::*;

fn fixture() -> Fixture {
    load(include_str!("fixtures/optax_lamb.json"))
}

/// Runs `body` with the transformation named by `case`.
macro_rules! with_tx {
    ($case:expr, |$tx:ident| $body:expr) => {{
        let cos = Cosine {
            f64: $case.dtype == "f64",
        };
        match $case.name.trim_end_matches("_f64") {
            "lamb_lr0.3" => {
                let $tx = lamb(0.3);
                $body
            }
            "lamb_lr1e-3_wd1e-2" => {
                let $tx = lamb(1e-3).weight_decay(1e-2);
                $body
            }
            "lamb_lr0.3_wd1e-1_mask" => {
                let $tx = lamb(0.3).weight_decay(1e-1).mask(decay_mask);
                $body
            }
            "lamb_cosine0.3_b1_0.8_b2_0.99_eps1e-8_eps_root1e-8_wd1e-2" => {
                let $tx = lamb(cos)
                    .b1(0.8)
                    .b2(0.99)
                    .eps(1e-8)
                    .eps_root(1e-8)
                    .weight_decay(1e-2);
                $body
            }
            "masked_adw1e-2_then_lamb1e-3" => {
                let $tx = chain((masked(add_decayed_weights(1e-2), decay_mask), lamb(1e-3)));
                $body
            }
            other => panic!("no flaxen equivalent registered for fixture case {other}"),
        }
    }};
}

#[test]
fn every_lamb_trace_is_reproduced() {
    optax_tree::every_trace!(fixture(), 10);
}

/// The state of `tx` on the case `name` resumes bit for bit through a
/// checkpoint; the saved keys are `keys`.
fn resumes_bit_for_bit<T: GradientTransformation<f32, Cpu>>(
    name: &str,
    tx: T,
    keys: &[impl AsRef<str>],
) {
    let fixture = fixture();
    let case = fixture.case(name);
    optax_tree::resumes_bit_for_bit(case, model(&Cpu::default(), &case.init), tx, keys);
}

#[test]
fn lamb_resumes_bit_for_bit() {
    resumes_bit_for_bit(
        "lamb_cosine0.3_b1_0.8_b2_0.99_eps1e-8_eps_root1e-8_wd1e-2",
        lamb(Cosine { f64: false })
            .b1(0.8)
            .b2(0.99)
            .eps(1e-8)
            .eps_root(1e-8)
            .weight_decay(1e-2),
        &MOMENTS,
    );
    resumes_bit_for_bit(
        "lamb_lr0.3_wd1e-1_mask",
        lamb(0.3).weight_decay(1e-1).mask(decay_mask),
        &MOMENTS,
    );
    resumes_bit_for_bit(
        "masked_adw1e-2_then_lamb1e-3",
        chain((masked(add_decayed_weights(1e-2), decay_mask), lamb(1e-3))),
        &moments_at("opt.1."),
    );
}

/// A zero parameter or a zero update keeps Optax's trust ratio of 1: the
/// first step moves the zero-initialised `conv_0.bias` by `-lr` times
/// Adam's direction, and the zero-gradient `dense_0.bias` not at all.
#[test]
fn zero_norms_take_a_trust_ratio_of_one() {
    let fixture = fixture();
    let case = fixture
        .cases
        .iter()
        .find(|c| c.name == "lamb_lr0.3")
        .unwrap();
    let dev = Cpu::default();
    let mut m = model::<f64>(&dev, &case.init);
    assert!(m.conv_b.as_vec().iter().all(|&v| v == 0.0));
    assert!(case.grads[0]["dense_0.bias"].data.iter().all(|&v| v == 0.0));
    let before = m.dense_b.as_vec();
    let tx = lamb(0.3);
    let mut state = tx.try_init_model(&m).unwrap();
    let grads = grads_of(&m, &case.grads[0]);
    tx.apply_model(&mut state, grads, &mut m).unwrap();
    assert_eq!(m.dense_b.as_vec(), before);
    // Adam's first step: g / (|g| + eps), i.e. ±1 up to eps (0 for g = 0).
    for (p, g) in m
        .conv_b
        .as_vec()
        .iter()
        .zip(&case.grads[0]["conv_0.bias"].data)
    {
        let want = -0.3 * g / (g.abs() + 1e-6);
        assert!((p - want).abs() <= 1e-12, "{p} vs {want}");
    }
}

#[test]
fn an_empty_lamb_mask_is_a_clear_error() {
    let dev = Cpu::default();
    let fixture = fixture();
    let m = model::<f32>(&dev, &fixture.cases[0].init);
    let err = lamb(1e-3)
        .weight_decay(1e-2)
        .mask(|k: &str| k.ends_with("kernel"))
        .try_init_model(&m)
        .unwrap_err();
    assert!(matches!(err, OptimError::EmptyMask { transform, .. } if transform == "lamb(..).mask"));
}

/// `TrainState` trains with `lamb`, and a checkpoint of it round-trips.
#[test]
fn train_state_with_lamb_round_trips() {
    let fixture = fixture();
    let case = &fixture.cases[0];
    let tx = lamb(0.3).weight_decay(1e-2).mask(decay_mask);
    train_state_round_trips(case, model(&Cpu::default(), &case.init), tx);
}
