//! Optax 0.2.8 traces of `masked`, `adamw(..).mask(..)` and
//! `multi_transform`, and of `adabelief` (`tests/fixtures/optax_masked.json`, written by
//! `tests/python/make_optax_masked.py`): 12 steps on a tree keyed by
//! checkpoint names (`conv_0.weight` 3x2x3x3, `conv_0.bias` 3,
//! `dense_0.weight` 5x7, `dense_0.bias` 5, `layer_norm_0.scale` 7), in
//! `f32` and `f64`, reproduced through both apply paths within 1e-5
//! (`f32`) and 1e-6 (`f64`) relative, `|got - want| <= rel * max(|want|,
//! 1e-2)`; states that resume bit for bit; clear errors for masks and
//! labels that do not fit the model.

#[path = "common/fixture.rs"]
mod fixture;

use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;

#[path = "common/optax_tree.rs"]
mod optax_tree;
use optax_tree::*;

fn fixture() -> Fixture {
    load(include_str!("fixtures/optax_masked.json"))
}

/// The labels of the multi_transform cases.
fn label_of(key: &str) -> &'static str {
    if key.starts_with("layer_norm_0.") {
        "frozen"
    } else if key.starts_with("dense_0.") {
        "head"
    } else {
        "body"
    }
}

/// Runs `body` with the transformation named by `case`.
macro_rules! with_tx {
    ($case:expr, |$tx:ident| $body:expr) => {{
        let cos = Cosine {
            f64: $case.dtype == "f64",
        };
        match $case.name.trim_end_matches("_f64") {
            "masked_adw1e-2_then_adam0.3" => {
                let $tx = chain((masked(add_decayed_weights(1e-2), decay_mask), adam(0.3)));
                $body
            }
            "masked_adw1e-1_then_adam1e-3" => {
                let $tx = chain((masked(add_decayed_weights(1e-1), decay_mask), adam(1e-3)));
                $body
            }
            "masked_adam_cosine0.3_alone" => {
                let $tx = masked(adam(cos), decay_mask);
                $body
            }
            "masked_sgd1e-3_momentum0.9_biases" => {
                let $tx = masked(sgd(1e-3, Some(0.9), false), |k: &str| !decay_mask(k));
                $body
            }
            "adamw_lr0.3_wd1e-2_mask" => {
                let $tx = adamw(0.3, 1e-2).mask(decay_mask);
                $body
            }
            "adamw_cosine0.3_wd1e-1_b1_0.8_b2_0.99_eps1e-6_mask" => {
                let $tx = adamw(cos, 1e-1).b1(0.8).b2(0.99).eps(1e-6).mask(decay_mask);
                $body
            }
            "adamw_lr1e-3_wd1e-1_mask" => {
                let $tx = adamw(1e-3, 1e-1).mask(decay_mask);
                $body
            }
            "multi_frozen_head_adam1e-3_body_sgd1e-2" => {
                let $tx = multi_transform(
                    (
                        ("frozen", set_to_zero()),
                        ("head", adam(1e-3)),
                        ("body", sgd(1e-2, None, false)),
                    ),
                    label_of,
                );
                $body
            }
            "multi_frozen_adam_cosine0.3_head_clip0.5_sgd0.3_momentum0.9_body" => {
                let $tx = multi_transform(
                    (
                        ("frozen", adam(cos)),
                        (
                            "head",
                            chain((clip_by_global_norm(0.5), sgd(0.3, Some(0.9), false))),
                        ),
                        ("body", adamw(1e-3, 1e-1).mask(decay_mask)),
                    ),
                    label_of,
                );
                $body
            }
            "adabelief_lr0.3" => {
                let $tx = adabelief(0.3);
                $body
            }
            "adabelief_cosine0.3_b1_0.8_b2_0.99_eps1e-8_eps_root0_nesterov" => {
                let $tx = adabelief(cos)
                    .b1(0.8)
                    .b2(0.99)
                    .eps(1e-8)
                    .eps_root(0.0)
                    .nesterov(true);
                $body
            }
            "masked_adw1e-2_then_adabelief1e-3_eps_root1e-8" => {
                let $tx = chain((
                    masked(add_decayed_weights(1e-2), decay_mask),
                    adabelief(1e-3).eps_root(1e-8),
                ));
                $body
            }
            other => panic!("no flaxen equivalent registered for fixture case {other}"),
        }
    }};
}

#[test]
fn every_masked_trace_is_reproduced() {
    optax_tree::every_trace!(fixture(), 24);
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
fn masked_states_resume_bit_for_bit() {
    resumes_bit_for_bit(
        "masked_adw1e-2_then_adam0.3",
        chain((masked(add_decayed_weights(1e-2), decay_mask), adam(0.3))),
        &moments_at("opt.1."),
    );
    resumes_bit_for_bit(
        "masked_adam_cosine0.3_alone",
        masked(adam(Cosine { f64: false }), decay_mask),
        &[
            "opt.inner.count",
            "opt.inner.mu.conv_0.weight",
            "opt.inner.mu.dense_0.weight",
            "opt.inner.nu.conv_0.weight",
            "opt.inner.nu.dense_0.weight",
        ],
    );
    resumes_bit_for_bit(
        "masked_sgd1e-3_momentum0.9_biases",
        masked(sgd(1e-3, Some(0.9), false), |k: &str| !decay_mask(k)),
        &[
            "opt.inner.count",
            "opt.inner.trace.conv_0.bias",
            "opt.inner.trace.dense_0.bias",
            "opt.inner.trace.layer_norm_0.scale",
        ],
    );
    resumes_bit_for_bit(
        "adamw_lr0.3_wd1e-2_mask",
        adamw(0.3, 1e-2).mask(decay_mask),
        &MOMENTS,
    );
}

#[test]
fn adabelief_resumes_bit_for_bit() {
    resumes_bit_for_bit(
        "adabelief_cosine0.3_b1_0.8_b2_0.99_eps1e-8_eps_root0_nesterov",
        adabelief(Cosine { f64: false })
            .b1(0.8)
            .b2(0.99)
            .eps(1e-8)
            .eps_root(0.0)
            .nesterov(true),
        &MOMENTS,
    );
}

#[test]
fn multi_transform_states_resume_bit_for_bit() {
    resumes_bit_for_bit(
        "multi_frozen_head_adam1e-3_body_sgd1e-2",
        multi_transform(
            (
                ("frozen", set_to_zero()),
                ("head", adam(1e-3)),
                ("body", sgd(1e-2, None, false)),
            ),
            label_of,
        ),
        &[
            "opt.body.count",
            "opt.head.count",
            "opt.head.mu.dense_0.bias",
            "opt.head.mu.dense_0.weight",
            "opt.head.nu.dense_0.bias",
            "opt.head.nu.dense_0.weight",
        ],
    );
    resumes_bit_for_bit(
        "multi_frozen_adam_cosine0.3_head_clip0.5_sgd0.3_momentum0.9_body",
        multi_transform(
            (
                ("frozen", adam(Cosine { f64: false })),
                (
                    "head",
                    chain((clip_by_global_norm(0.5), sgd(0.3, Some(0.9), false))),
                ),
                ("body", adamw(1e-3, 1e-1).mask(decay_mask)),
            ),
            label_of,
        ),
        &[
            "opt.body.count",
            "opt.body.mu.conv_0.bias",
            "opt.body.mu.conv_0.weight",
            "opt.body.nu.conv_0.bias",
            "opt.body.nu.conv_0.weight",
            "opt.frozen.count",
            "opt.frozen.mu.layer_norm_0.scale",
            "opt.frozen.nu.layer_norm_0.scale",
            "opt.head.1.count",
            "opt.head.1.trace.dense_0.bias",
            "opt.head.1.trace.dense_0.weight",
        ],
    );
}

/// Masked-out updates come back exactly as they went in, and `set_to_zero`
/// leaves its parameters in place, bit for bit.
#[test]
fn masked_out_updates_pass_through_unchanged() {
    let fixture = fixture();
    let case = &fixture.cases[0];
    let dev = Cpu::default();
    let m = model::<f32>(&dev, &case.init);
    let tx = masked(adam(0.3), |k: &str| k == "dense_0.weight");
    let mut state = tx.init_model(&m).unwrap();
    let params = Params::of(&m).unwrap();
    let grads = grads_of(&m, &case.grads[0]);
    let mut updates = tx.update_model(&mut state, grads, &m).unwrap();
    for (i, key) in KEYS.iter().enumerate() {
        let got = updates.tensor(i, &params).unwrap().as_vec();
        let want: Vec<f32> = case.grads[0][*key].data.iter().map(|&v| v as f32).collect();
        if *key == "dense_0.weight" {
            assert_ne!(got, want);
        } else {
            assert_eq!(got, want, "{key}");
        }
    }

    let tx = multi_transform(
        (("frozen", set_to_zero()), ("rest", sgd(0.1, None, false))),
        |k: &str| if decay_mask(k) { "rest" } else { "frozen" },
    );
    let mut m = model::<f32>(&dev, &case.init);
    let before = values(&m);
    let mut state = tx.try_init_model(&m).unwrap();
    let grads = grads_of(&m, &case.grads[0]);
    tx.apply_model(&mut state, grads, &mut m).unwrap();
    let after = values(&m);
    for i in 0..5 {
        assert_eq!(before[i] == after[i], !decay_mask(KEYS[i]), "{}", KEYS[i]);
    }
}

#[test]
fn masks_and_labels_that_do_not_fit_are_clear_errors() {
    let dev = Cpu::default();
    let fixture = fixture();
    let m = model::<f32>(&dev, &fixture.cases[0].init);

    let err = masked(adam(1e-3), |k: &str| k.starts_with("conv_1."))
        .try_init_model(&m)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "masked: the mask selects none of the parameters [\"conv_0.weight\", \"conv_0.bias\", \
         \"dense_0.weight\", \"dense_0.bias\", \"layer_norm_0.scale\"]"
    );
    // Inside combinators, and in adamw's mask.
    let tx = apply_if_finite(
        chain((
            masked(add_decayed_weights(1e-4), |_: &str| false),
            adam(1e-3),
        )),
        3,
    );
    assert!(matches!(
        tx.try_init_model(&m),
        Err(OptimError::EmptyMask { transform, .. }) if transform == "masked"
    ));
    let err = adamw(1e-3, 1e-2)
        .mask(|k: &str| k.ends_with("kernel"))
        .try_init_model(&m)
        .unwrap_err();
    assert!(
        matches!(err, OptimError::EmptyMask { transform, .. } if transform == "adamw(..).mask")
    );

    let tx = multi_transform(
        (("head", adam(1e-3)), ("body", sgd(1e-2, None, false))),
        |k: &str| {
            if k.starts_with("dense") {
                "head"
            } else {
                "bdy"
            }
        },
    );
    let err = tx.try_init_model(&m).unwrap_err();
    assert_eq!(
        err,
        OptimError::UnknownLabel {
            key: "conv_0.weight".into(),
            label: "bdy".into(),
            labels: vec!["head".into(), "body".into()],
        }
    );
    assert_eq!(
        err.to_string(),
        "multi_transform: parameter `conv_0.weight` has label `bdy`, which has no \
         transformation (labels: [\"head\", \"body\"])"
    );
    // The plain init and update do not fail: such parameters stay in place.
    let mut m2 = m.clone();
    let mut state = tx.init_model(&m2).unwrap();
    let grads = grads_of(&m2, &fixture.cases[0].grads[0]);
    tx.apply_model(&mut state, grads, &mut m2).unwrap();
    assert_eq!(m2.conv_w.as_vec(), m.conv_w.as_vec());
    assert_ne!(m2.dense_w.as_vec(), m.dense_w.as_vec());

    let tx = multi_transform(
        (("a", set_to_zero()), ("a", sgd(1e-2, None, false))),
        |_: &str| "a",
    );
    assert_eq!(
        tx.try_init_model(&m).unwrap_err(),
        OptimError::DuplicateLabel { label: "a".into() }
    );
    // A member's own mask is checked against its group only.
    let tx = multi_transform(
        (
            (
                "head",
                masked(add_decayed_weights(1e-2), |k: &str| k.starts_with("conv")),
            ),
            ("rest", identity()),
        ),
        |k: &str| {
            if k.starts_with("dense") {
                "head"
            } else {
                "rest"
            }
        },
    );
    assert!(matches!(
        tx.try_init_model(&m),
        Err(OptimError::EmptyMask { keys, .. }) if keys == ["dense_0.weight", "dense_0.bias"]
    ));
}

/// `TrainState` trains with a masked optimizer, and a checkpoint of it
/// round-trips.
#[test]
fn train_state_with_a_masked_optimizer_round_trips() {
    let fixture = fixture();
    let case = &fixture.cases[0];
    let tx = chain((masked(add_decayed_weights(1e-2), decay_mask), adam(0.3)));
    train_state_round_trips(case, model(&Cpu::default(), &case.init), tx);
}
