//! Optax 0.2.8 traces of `lamb` (`tests/fixtures/optax_lamb.json`, written
//! by `tests/python/make_optax_lamb.py`): 12 steps on a tree keyed by
//! checkpoint names (`conv_0.weight` 3x2x3x3, `conv_0.bias` 3,
//! `dense_0.weight` 5x7, `dense_0.bias` 5, `layer_norm_0.scale` 7), with
//! learning rates 0.3, 1e-3 and a cosine schedule, weight decay off, on
//! and masked, and both zero-norm branches of the trust ratio; in `f32`
//! and `f64`, reproduced through both apply paths within 1e-5 (`f32`) and
//! 1e-6 (`f64`) relative, `|got - want| <= rel * max(|want|, 1e-2)`;
//! states that resume bit for bit through a checkpoint.

use std::collections::BTreeMap;

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::{cosine_decay, Schedule};
use flaxen::runtime::state::{StateDict, StateMap};
use serde::Deserialize;

#[derive(Debug, Clone)]
struct Net<E: Dtype, D: Storage<E>> {
    conv_w: Tensor<Rank4<3, 2, 3, 3>, E, D>,
    conv_b: Tensor<Rank1<3>, E, D>,
    dense_w: Tensor<Rank2<5, 7>, E, D>,
    dense_b: Tensor<Rank1<5>, E, D>,
    ln_scale: Tensor<Rank1<7>, E, D>,
}

impl<E: Dtype, D: Device<E>> TensorCollection<E, D> for Net<E, D> {
    type To<E2: Dtype, D2: Device<E2>> = Net<E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::tensor(
                    "conv_0.weight",
                    |s| &s.conv_w,
                    |s| &mut s.conv_w,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "conv_0.bias",
                    |s| &s.conv_b,
                    |s| &mut s.conv_b,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "dense_0.weight",
                    |s| &s.dense_w,
                    |s| &mut s.dense_w,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "dense_0.bias",
                    |s| &s.dense_b,
                    |s| &mut s.dense_b,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "layer_norm_0.scale",
                    |s| &s.ln_scale,
                    |s| &mut s.ln_scale,
                    TensorOptions::reset_to_zeros(),
                ),
            ),
            |(conv_w, conv_b, dense_w, dense_b, ln_scale)| Net {
                conv_w,
                conv_b,
                dense_w,
                dense_b,
                ln_scale,
            },
        )
    }
}

const KEYS: [&str; 5] = [
    "conv_0.weight",
    "conv_0.bias",
    "dense_0.weight",
    "dense_0.bias",
    "layer_norm_0.scale",
];

#[derive(Deserialize, Clone)]
struct Arr {
    shape: Vec<usize>,
    data: Vec<f64>,
}

type Tree = BTreeMap<String, Arr>;

#[derive(Deserialize)]
struct Case {
    name: String,
    dtype: String,
    init: Tree,
    grads: Vec<Tree>,
    params_after_each_step: Vec<Tree>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("fixtures/optax_lamb.json")).unwrap()
}

fn cast<E: Dtype>(t: &Tree, key: &str, shape: &[usize]) -> Vec<E> {
    let a = &t[key];
    assert_eq!(a.shape, shape, "{key}");
    a.data.iter().map(|&v| E::from_f64(v).unwrap()).collect()
}

fn model<E: Dtype>(dev: &Cpu, t: &Tree) -> Net<E, Cpu>
where
    Cpu: Device<E>,
{
    Net {
        conv_w: dev.tensor_from_vec(cast(t, KEYS[0], &[3, 2, 3, 3]), Default::default()),
        conv_b: dev.tensor_from_vec(cast(t, KEYS[1], &[3]), Default::default()),
        dense_w: dev.tensor_from_vec(cast(t, KEYS[2], &[5, 7]), Default::default()),
        dense_b: dev.tensor_from_vec(cast(t, KEYS[3], &[5]), Default::default()),
        ln_scale: dev.tensor_from_vec(cast(t, KEYS[4], &[7]), Default::default()),
    }
}

fn values<E: Dtype>(m: &Net<E, Cpu>) -> [Vec<E>; 5]
where
    Cpu: Device<E>,
{
    [
        m.conv_w.as_vec(),
        m.conv_b.as_vec(),
        m.dense_w.as_vec(),
        m.dense_b.as_vec(),
        m.ln_scale.as_vec(),
    ]
}

/// Gradients equal to `g` exactly: d/dp sum(p * gp) = gp.
fn grads_of<E: Dtype>(m: &Net<E, Cpu>, g: &Tree) -> Gradients<E, Cpu>
where
    Cpu: Device<E>,
{
    let gm = model::<E>(m.conv_w.device(), g);
    let l0 = (m.conv_w.clone().traced(m.alloc_grads()) * gm.conv_w).sum();
    let (l0, tape) = l0.split_tape();
    let l1 = (m.conv_b.clone().put_tape(tape) * gm.conv_b).sum();
    let (l1, tape) = l1.split_tape();
    let l2 = (m.dense_w.clone().put_tape(tape) * gm.dense_w).sum();
    let (l2, tape) = l2.split_tape();
    let l3 = (m.dense_b.clone().put_tape(tape) * gm.dense_b).sum();
    let (l3, tape) = l3.split_tape();
    let l4 = (m.ln_scale.clone().put_tape(tape) * gm.ln_scale).sum();
    (l4 + l3 + l2 + l1 + l0).backward()
}

/// Largest `|got - want| / max(|want|, 1e-2)` over the trace's steps.
fn trace_error<E: Dtype, T: GradientTransformation<E, Cpu>>(case: &Case, tx: &T, fused: bool) -> f64
where
    Cpu: Device<E>,
{
    let dev = Cpu::default();
    let mut m = model::<E>(&dev, &case.init);
    let mut state = tx.try_init_model(&m).unwrap();
    let mut worst = 0.0f64;
    for (step, want) in case.params_after_each_step.iter().enumerate() {
        let grads = grads_of(&m, &case.grads[step]);
        if fused {
            tx.apply_model(&mut state, grads, &mut m).unwrap();
        } else {
            let updates = tx.update_model(&mut state, grads, &m).unwrap();
            apply_updates(&mut m, updates).unwrap();
        }
        for (got, key) in values(&m).iter().zip(KEYS) {
            for (g, w) in got.iter().zip(&want[key].data) {
                let g = g.to_f64().unwrap();
                worst = worst.max((g - w).abs() / w.abs().max(1e-2));
            }
        }
    }
    worst
}

/// Optax's `cosine_decay_schedule(0.3, decay_steps=12)`: flaxen's
/// `cosine_decay` for `f32` traces, the same formula in `f64` for `f64`
/// traces (flaxen's schedules compute in `f32`, as Optax does without x64).
#[derive(Debug, Clone)]
struct Cosine {
    f64: bool,
}

impl Schedule for Cosine {
    fn value(&self, step: u64) -> f64 {
        if self.f64 {
            let t = step.min(12) as f64;
            0.3 * (0.5 * (1.0 + (std::f64::consts::PI * t / 12.0).cos()))
        } else {
            cosine_decay(0.3, 12, 0.0).value(step)
        }
    }
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
    let fixture = fixture();
    assert_eq!(fixture.cases.len(), 10, "a new case needs a line here");
    for case in &fixture.cases {
        assert_eq!(case.grads.len(), 12);
        let tol = if case.dtype == "f64" { 1e-6 } else { 1e-5 };
        let errs = [false, true].map(|fused| match case.dtype.as_str() {
            "f32" => with_tx!(case, |tx| trace_error::<f32, _>(case, &tx, fused)),
            "f64" => with_tx!(case, |tx| trace_error::<f64, _>(case, &tx, fused)),
            other => panic!("dtype {other}"),
        });
        eprintln!(
            "{:70} max rel error (two-step, fused): {:.1e} {:.1e}",
            case.name, errs[0], errs[1]
        );
        for (path, e) in ["update_model + apply_updates", "apply_model"]
            .iter()
            .zip(errs)
        {
            assert!(
                e <= tol,
                "{} ({path}): relative error {e:e} > {tol:e}",
                case.name
            );
        }
    }
}

/// A state saved after 5 steps (through a `StateMap` and the exact
/// counters) and loaded into a fresh one resumes bit for bit; the saved
/// keys are `keys`.
fn resumes_bit_for_bit<T: GradientTransformation<f32, Cpu>>(case: &str, tx: T, keys: &[&str]) {
    let fixture = fixture();
    let case = fixture.cases.iter().find(|c| c.name == case).unwrap();
    let dev = Cpu::default();
    let mut a = model::<f32>(&dev, &case.init);
    let mut sa = tx.try_init_model(&a).unwrap();
    for step in 0..5 {
        let grads = grads_of(&a, &case.grads[step]);
        tx.apply_model(&mut sa, grads, &mut a).unwrap();
    }
    let mut saved = StateMap::new();
    sa.save_state("opt.", &mut saved);
    let mut counters = StateMap::new();
    sa.save_counters("opt.", &mut counters);
    let found: Vec<_> = saved.keys().cloned().collect();
    assert_eq!(found, keys);
    let mut b = a.clone();
    let mut sb = tx.try_init_model(&b).unwrap();
    sb.load_state("opt.", &saved).unwrap();
    sb.load_counters("opt.", &counters).unwrap();
    for (step, g) in case.grads.iter().enumerate().skip(5) {
        let grads = grads_of(&a, g);
        tx.apply_model(&mut sa, grads, &mut a).unwrap();
        let grads = grads_of(&b, g);
        if step % 2 == 0 {
            tx.apply_model(&mut sb, grads, &mut b).unwrap();
        } else {
            let updates = tx.update_model(&mut sb, grads, &b).unwrap();
            apply_updates(&mut b, updates).unwrap();
        }
    }
    assert_eq!(values(&a), values(&b));
}

const MOMENTS: [&str; 11] = [
    "opt.count",
    "opt.mu.conv_0.bias",
    "opt.mu.conv_0.weight",
    "opt.mu.dense_0.bias",
    "opt.mu.dense_0.weight",
    "opt.mu.layer_norm_0.scale",
    "opt.nu.conv_0.bias",
    "opt.nu.conv_0.weight",
    "opt.nu.dense_0.bias",
    "opt.nu.dense_0.weight",
    "opt.nu.layer_norm_0.scale",
];

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
    let chained: Vec<String> = MOMENTS
        .iter()
        .map(|k| k.replace("opt.", "opt.1."))
        .collect();
    let chained: Vec<&str> = chained.iter().map(String::as_str).collect();
    resumes_bit_for_bit(
        "masked_adw1e-2_then_lamb1e-3",
        chain((masked(add_decayed_weights(1e-2), decay_mask), lamb(1e-3))),
        &chained,
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
    use flaxen::runtime::train_state::TrainState;
    let dev = Cpu::default();
    let fixture = fixture();
    let case = &fixture.cases[0];
    let tx = lamb(0.3).weight_decay(1e-2).mask(decay_mask);
    let mut a = TrainState::create(model::<f32>(&dev, &case.init), tx.clone()).unwrap();
    for g in &case.grads[..3] {
        let grads = grads_of(&a.params, g);
        a.apply_gradients(grads).unwrap();
    }
    let mut saved = StateMap::new();
    a.save_state("", &mut saved);
    let mut counters = StateMap::new();
    a.save_counters("", &mut counters);
    let mut b = TrainState::create(model::<f32>(&dev, &case.init), tx).unwrap();
    b.load_state("", &saved).unwrap();
    b.load_counters("", &counters).unwrap();
    for g in &case.grads[3..] {
        let grads = grads_of(&a.params, g);
        a.apply_gradients(grads).unwrap();
        let grads = grads_of(&b.params, g);
        b.apply_gradients(grads).unwrap();
    }
    assert_eq!(values(&a.params), values(&b.params));
}
