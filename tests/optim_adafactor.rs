//! Optax 0.2.8 traces of `adafactor` (`tests/fixtures/optax_adafactor.json`,
//! written by `tests/python/make_optax_adafactor.py`): 12 steps on a tree
//! keyed by checkpoint names (`conv_0.weight` 3x2x3x3, `conv_0.bias` 3,
//! `dense_0.weight` 5x7, `dense_0.bias` 5, `layer_norm_0.scale` 7,
//! `dense_1.weight` 7x3), with learning rates 0.3, 1e-2, 1e-3 and a cosine
//! schedule, factored moments over either dimension order, clipping and
//! parameter scaling on and off; in `f32` and `f64`, reproduced through both
//! apply paths within 1e-5 (`f32`) and 1e-6 (`f64`) relative, `|got -
//! want| <= rel * max(|want|, 1e-2)`; states that resume bit for bit
//! through a checkpoint.

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
    dense1_w: Tensor<Rank2<7, 3>, E, D>,
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
                Self::tensor(
                    "dense_1.weight",
                    |s| &s.dense1_w,
                    |s| &mut s.dense1_w,
                    TensorOptions::reset_to_zeros(),
                ),
            ),
            |(conv_w, conv_b, dense_w, dense_b, ln_scale, dense1_w)| Net {
                conv_w,
                conv_b,
                dense_w,
                dense_b,
                ln_scale,
                dense1_w,
            },
        )
    }
}

const KEYS: [&str; 6] = [
    "conv_0.weight",
    "conv_0.bias",
    "dense_0.weight",
    "dense_0.bias",
    "layer_norm_0.scale",
    "dense_1.weight",
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
    serde_json::from_str(include_str!("fixtures/optax_adafactor.json")).unwrap()
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
        dense1_w: dev.tensor_from_vec(cast(t, KEYS[5], &[7, 3]), Default::default()),
    }
}

fn values<E: Dtype>(m: &Net<E, Cpu>) -> [Vec<E>; 6]
where
    Cpu: Device<E>,
{
    [
        m.conv_w.as_vec(),
        m.conv_b.as_vec(),
        m.dense_w.as_vec(),
        m.dense_b.as_vec(),
        m.ln_scale.as_vec(),
        m.dense1_w.as_vec(),
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
    let (l4, tape) = l4.split_tape();
    let l5 = (m.dense1_w.clone().put_tape(tape) * gm.dense1_w).sum();
    (l5 + l4 + l3 + l2 + l1 + l0).backward()
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
            "adafactor_lr0.3" => {
                let $tx = adafactor(0.3);
                $body
            }
            "adafactor_lr1e-2_min_dim3" => {
                let $tx = adafactor(1e-2).min_dim_size_to_factor(3);
                $body
            }
            "adafactor_cosine0.3_min_dim2_decay0.5_noclip_noscale" => {
                let $tx = adafactor(cos)
                    .min_dim_size_to_factor(2)
                    .decay_rate(0.5)
                    .clipping_threshold(None)
                    .multiply_by_parameter_scale(false);
                $body
            }
            "adafactor_lr1e-3_min_dim3_clip0.5_eps1e-20" => {
                let $tx = adafactor(1e-3)
                    .min_dim_size_to_factor(3)
                    .clipping_threshold(Some(0.5))
                    .eps(1e-20);
                $body
            }
            "adafactor_lr1e-2_min_dim2_unfactored" => {
                let $tx = adafactor(1e-2).min_dim_size_to_factor(2).factored(false);
                $body
            }
            other => panic!("no flaxen equivalent registered for fixture case {other}"),
        }
    }};
}

#[test]
fn every_adafactor_trace_is_reproduced() {
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

#[test]
fn adafactor_resumes_bit_for_bit() {
    resumes_bit_for_bit(
        "adafactor_cosine0.3_min_dim2_decay0.5_noclip_noscale",
        adafactor(Cosine { f64: false })
            .min_dim_size_to_factor(2)
            .decay_rate(0.5)
            .clipping_threshold(None)
            .multiply_by_parameter_scale(false),
        &[
            "opt.count",
            "opt.v.conv_0.bias",
            "opt.v.dense_0.bias",
            "opt.v.layer_norm_0.scale",
            "opt.v_col.conv_0.weight",
            "opt.v_col.dense_0.weight",
            "opt.v_col.dense_1.weight",
            "opt.v_row.conv_0.weight",
            "opt.v_row.dense_0.weight",
            "opt.v_row.dense_1.weight",
        ],
    );
    resumes_bit_for_bit(
        "adafactor_lr0.3",
        adafactor(0.3),
        &[
            "opt.count",
            "opt.v.conv_0.bias",
            "opt.v.conv_0.weight",
            "opt.v.dense_0.bias",
            "opt.v.dense_0.weight",
            "opt.v.dense_1.weight",
            "opt.v.layer_norm_0.scale",
        ],
    );
}

/// The factored moments have Optax's shapes: the tensor's shape without
/// its largest dimension (`v_row`) or its second largest (`v_col`).
#[test]
fn factored_moments_have_optax_shapes() {
    let dev = Cpu::default();
    let fixture = fixture();
    let m = model::<f32>(&dev, &fixture.cases[0].init);
    let state = adafactor(1e-2)
        .min_dim_size_to_factor(2)
        .init_model(&m)
        .unwrap();
    let mut saved = StateMap::new();
    state.save_state("", &mut saved);
    let shape = |k: &str| saved[k].shape.clone();
    assert_eq!(shape("v_row.conv_0.weight"), [3, 2, 3]);
    assert_eq!(shape("v_col.conv_0.weight"), [3, 2, 3]);
    assert_eq!(shape("v_row.dense_0.weight"), [5]);
    assert_eq!(shape("v_col.dense_0.weight"), [7]);
    assert_eq!(shape("v_row.dense_1.weight"), [3]);
    assert_eq!(shape("v_col.dense_1.weight"), [7]);
    assert_eq!(shape("v.dense_0.bias"), [5]);
}

/// `TrainState` trains with `adafactor`, and a checkpoint of it round-trips.
#[test]
fn train_state_with_adafactor_round_trips() {
    use flaxen::runtime::train_state::TrainState;
    let dev = Cpu::default();
    let fixture = fixture();
    let case = &fixture.cases[0];
    let tx = adafactor(1e-2).min_dim_size_to_factor(3);
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
