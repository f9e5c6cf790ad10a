//! Optax 0.2.8 traces at large and small learning rates
//! (`tests/fixtures/optax_exact.json`, written by
//! `tests/python/make_optax_exact.py`): 12 steps on a `w` (5x3), `b` (7)
//! tree, in `f32` and `f64`, reproduced through both apply paths: bit for
//! bit where flaxen computes what Optax computes in `f32` (Adam, Lion, the
//! clipped chain; `f32_bound` lists every case), else within 1e-5
//! relative, `|got - want| <= rel * max(|want|, 1e-2)`; `f64` within
//! 1e-12. Moving Adam's `eps` inside the square root changes its trace by
//! 5e-6 relative, which only the bit-for-bit bound catches
//! (`optax_mutations_fail_the_strict_bounds`). Adam's traces need Optax's rounding of its
//! constants; the same traces with dfdx's (PyTorch's) arithmetic are
//! printed for comparison. rmsprop's need Optax's order (momentum after the
//! learning rate); XLA's `rsqrt` is within an ulp of the correctly rounded
//! one flaxen uses, hence its few-ulp differences.

#[path = "common/fixture.rs"]
mod fixture;

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::{cosine_decay, Schedule};
use flaxen::runtime::state::{StateDict, StateMap};
use serde::Deserialize;

#[derive(Debug, Clone)]
struct Wb<E: Dtype, D: Storage<E>> {
    w: Tensor<Rank2<5, 3>, E, D>,
    b: Tensor<Rank1<7>, E, D>,
}

impl<E: Dtype, D: Device<E>> TensorCollection<E, D> for Wb<E, D> {
    type To<E2: Dtype, D2: Device<E2>> = Wb<E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::tensor("w", |s| &s.w, |s| &mut s.w, TensorOptions::reset_to_zeros()),
                Self::tensor("b", |s| &s.b, |s| &mut s.b, TensorOptions::reset_to_zeros()),
            ),
            |(w, b)| Wb { w, b },
        )
    }
}

#[derive(Deserialize, Clone)]
struct Arr {
    shape: Vec<usize>,
    data: Vec<f64>,
}

#[derive(Deserialize, Clone)]
struct Tree {
    w: Arr,
    b: Arr,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    dtype: String,
    init: Tree,
    grads: Vec<Tree>,
    params_after_each_step: Vec<Tree>,
    /// `(step, leaf, flat index, "nan" | "inf" | "-inf")`: non-finite
    /// gradient entries, which JSON cannot hold.
    #[serde(default)]
    poison: Vec<(usize, String, usize, String)>,
}

/// The gradients of `step`, with the case's non-finite entries.
fn grads_at(case: &Case, step: usize) -> Tree {
    let mut g = case.grads[step].clone();
    for (_, leaf, i, v) in case.poison.iter().filter(|p| p.0 == step) {
        let arr = if leaf == "w" { &mut g.w } else { &mut g.b };
        arr.data[*i] = v.parse().unwrap();
    }
    g
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

fn cast<E: Dtype>(x: &Arr) -> Vec<E> {
    x.data.iter().map(|&v| E::from_f64(v).unwrap()).collect()
}

fn model<E: Dtype>(dev: &Cpu, t: &Tree) -> Wb<E, Cpu>
where
    Cpu: Device<E>,
{
    assert_eq!(
        (t.w.shape.as_slice(), t.b.shape.as_slice()),
        (&[5, 3][..], &[7][..])
    );
    Wb {
        w: dev.tensor_from_vec(cast(&t.w), (Const::<5>, Const::<3>)),
        b: dev.tensor_from_vec(cast(&t.b), (Const::<7>,)),
    }
}

/// Gradients equal to `g` exactly: d/dw sum(w * gw) = gw.
fn grads_of<E: Dtype>(m: &Wb<E, Cpu>, g: &Tree) -> Gradients<E, Cpu>
where
    Cpu: Device<E>,
{
    let dev = m.w.device().clone();
    let gw = dev.tensor_from_vec(cast(&g.w), (Const::<5>, Const::<3>));
    let gb = dev.tensor_from_vec(cast(&g.b), (Const::<7>,));
    let lw = (m.w.clone().traced(m.alloc_grads()) * gw).sum();
    let (lw, tape) = lw.split_tape();
    let lb = (m.b.clone().put_tape(tape) * gb).sum();
    (lb + lw).backward()
}

/// How far a run is from its trace: the largest `|got - want| / max(|want|,
/// 1e-2)` over the steps, and whether every parameter after every step is
/// the trace's value rounded to the dtype, bit for bit.
#[derive(Debug, Clone, Copy)]
struct Gap {
    rel: f64,
    exact: bool,
}

/// [`Gap`] of `tx` over `case` (`fused`: `apply_model`, else
/// `update_model` + `apply_updates`).
fn trace_error<E: Dtype, T: GradientTransformation<E, Cpu>>(case: &Case, tx: &T, fused: bool) -> Gap
where
    Cpu: Device<E>,
{
    let dev = Cpu::default();
    let mut m = model::<E>(&dev, &case.init);
    let mut state = tx.init_model(&m).unwrap();
    let mut gap = Gap {
        rel: 0.0,
        exact: true,
    };
    for (step, want) in case.params_after_each_step.iter().enumerate() {
        let grads = grads_of(&m, &grads_at(case, step));
        if fused {
            tx.apply_model(&mut state, grads, &mut m).unwrap();
        } else {
            let updates = tx.update_model(&mut state, grads, &m).unwrap();
            apply_updates(&mut m, updates).unwrap();
        }
        for (got, want) in [(m.w.as_vec(), &want.w), (m.b.as_vec(), &want.b)] {
            let e = crate::fixture::max_rel_error(&got, &want.data, 1e-2);
            gap.rel = crate::fixture::worse(e, gap.rel);
            gap.exact &= got.iter().zip(cast::<E>(want)).all(|(g, w)| *g == w);
        }
    }
    gap
}

/// Optax's `cosine_decay_schedule(5e-2, decay_steps=12)`: flaxen's
/// `cosine_decay` for `f32` traces; for `f64` traces the same formula in
/// `f64` (flaxen's schedules compute in `f32`, as Optax does without x64,
/// which is 1e-7 off a JAX x64 schedule).
#[derive(Debug, Clone)]
struct Cosine {
    f64: bool,
    peak: f64,
}

fn cosine(case: &Case) -> Cosine {
    Cosine {
        f64: case.dtype == "f64",
        peak: 5e-2,
    }
}

impl Cosine {
    fn peak(self, peak: f64) -> Self {
        Cosine { peak, ..self }
    }
}

impl Schedule for Cosine {
    fn value(&self, step: u64) -> f64 {
        if self.f64 {
            let t = step.min(12) as f64;
            self.peak * (0.5 * (1.0 + (std::f64::consts::PI * t / 12.0).cos()))
        } else {
            cosine_decay(self.peak, 12, 0.0).value(step)
        }
    }
}

/// Runs `f` with the transformation named by `case` (exact or PyTorch
/// arithmetic).
macro_rules! with_tx {
    ($case:expr, $pytorch:expr, |$tx:ident| $body:expr) => {{
        let pt = $pytorch;
        match $case.name.trim_end_matches("_f64") {
            "adam_lr5e-2" => {
                let $tx = adam(5e-2).pytorch_arithmetic(pt);
                $body
            }
            "adam_lr1e-3_b1_0.8_b2_0.99_eps1e-6" => {
                let $tx = adam(1e-3).b1(0.8).b2(0.99).eps(1e-6).pytorch_arithmetic(pt);
                $body
            }
            "adam_lr0.3" => {
                let $tx = adam(0.3).pytorch_arithmetic(pt);
                $body
            }
            "adamw_lr5e-2_wd1e-2" => {
                let $tx = adamw(5e-2, 1e-2).pytorch_arithmetic(pt);
                $body
            }
            "adamw_cosine5e-2_12steps_wd1e-4" => {
                let $tx = adamw(cosine(&$case), 1e-4).pytorch_arithmetic(pt);
                $body
            }
            "chain_clip0.5_adam2e-2" => {
                let $tx = chain((clip_by_global_norm(0.5), adam(2e-2).pytorch_arithmetic(pt)));
                $body
            }
            // rmsprop has one arithmetic (`pt` is Adam's option).
            "rmsprop_lr3e-2" => {
                let $tx = rmsprop(3e-2);
                $body
            }
            "rmsprop_lr1e-2_centered" => {
                let $tx = rmsprop(1e-2).centered(true);
                $body
            }
            "rmsprop_lr5e-2_momentum0.9" => {
                let $tx = rmsprop(5e-2).momentum(0.9);
                $body
            }
            "rmsprop_lr5e-2_momentum0.9_nesterov" => {
                let $tx = rmsprop(5e-2).momentum(0.9).nesterov(true);
                $body
            }
            "rmsprop_cosine5e-2_12steps_decay0.95_eps1e-6_centered_momentum0.5_nesterov" => {
                let $tx = rmsprop(cosine(&$case))
                    .decay(0.95)
                    .eps(1e-6)
                    .centered(true)
                    .momentum(0.5)
                    .nesterov(true);
                $body
            }
            "apply_if_finite_adam5e-2_max2" => {
                let $tx = apply_if_finite(adam(5e-2).pytorch_arithmetic(pt), 2);
                $body
            }
            "apply_if_finite_adamw_cosine5e-2_12steps_wd1e-4_max1" => {
                let $tx = apply_if_finite(adamw(cosine(&$case), 1e-4).pytorch_arithmetic(pt), 1);
                $body
            }
            "adagrad_lr5e-2" => {
                let $tx = adagrad(5e-2);
                $body
            }
            "adagrad_cosine1e-1_12steps_init0_eps1e-10" => {
                let $tx = adagrad(cosine(&$case).peak(1e-1))
                    .initial_accumulator_value(0.0)
                    .eps(1e-10);
                $body
            }
            "lion_lr1e-2" => {
                let $tx = lion(1e-2);
                $body
            }
            "lion_cosine3e-2_12steps_b1_0.95_b2_0.98_wd1e-2" => {
                let $tx = lion(cosine(&$case).peak(3e-2))
                    .b1(0.95)
                    .b2(0.98)
                    .weight_decay(1e-2);
                $body
            }
            other => panic!("no flaxen equivalent registered for fixture case {other}"),
        }
    }};
}

fn errors(case: &Case, pytorch: bool) -> [Gap; 2] {
    [false, true].map(|fused| match case.dtype.as_str() {
        "f32" => with_tx!(case, pytorch, |tx| trace_error::<f32, _>(case, &tx, fused)),
        "f64" => with_tx!(case, pytorch, |tx| trace_error::<f64, _>(case, &tx, fused)),
        other => panic!("dtype {other}"),
    })
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("fixtures/optax_exact.json")).unwrap()
}

/// What each `f32` case must reach on each path (`update_model` +
/// `apply_updates`, then `apply_model`): `None` is Optax's values bit for
/// bit; `Some(rel)` a relative tolerance, for the cases whose arithmetic
/// differs from XLA's by design: XLA's `rsqrt` is within an ulp of the
/// correctly rounded one flaxen uses (rmsprop, adagrad), and
/// `apply_if_finite` rounds Adam's count corrections after skipped steps
/// differently (1.5e-7). `adamw` is exact on both paths: the two-step path
/// runs its primitives (`scale_by_adam`, `add_decayed_weights`,
/// `scale_by_learning_rate`) in Optax's order, the fused pass the same
/// arithmetic in one kernel.
fn f32_bound(name: &str) -> [Option<f64>; 2] {
    let exact = [None, None];
    match name {
        "adam_lr5e-2" | "adam_lr1e-3_b1_0.8_b2_0.99_eps1e-6" | "adam_lr0.3" => exact,
        "chain_clip0.5_adam2e-2" | "rmsprop_lr1e-2_centered" => exact,
        "lion_lr1e-2" | "lion_cosine3e-2_12steps_b1_0.95_b2_0.98_wd1e-2" => exact,
        "adamw_lr5e-2_wd1e-2" | "adamw_cosine5e-2_12steps_wd1e-4" => exact,
        _ => [Some(1e-5), Some(1e-5)],
    }
}

#[test]
fn every_exact_trace_is_reproduced() {
    let fixture = fixture();
    assert_eq!(fixture.cases.len(), 34, "a new case needs a line here");
    for case in &fixture.cases {
        let exact = errors(case, false);
        let pytorch = errors(case, true);
        eprintln!(
            "{:45} max rel error (two-step, fused): optax arithmetic {:.1e} {:.1e} (bit for bit: {} {}), \
             pytorch arithmetic {:.1e} {:.1e}",
            case.name,
            exact[0].rel,
            exact[1].rel,
            exact[0].exact,
            exact[1].exact,
            pytorch[0].rel,
            pytorch[1].rel
        );
        // f64 traces (JAX with x64) within 1e-12 on every path.
        let bounds = match case.dtype.as_str() {
            "f64" => [Some(1e-12); 2],
            _ => f32_bound(&case.name),
        };
        for ((path, gap), bound) in ["update_model + apply_updates", "apply_model"]
            .iter()
            .zip(exact)
            .zip(bounds)
        {
            match bound {
                None => assert!(
                    gap.exact,
                    "{} ({path}): not Optax's values bit for bit (relative error {:e})",
                    case.name, gap.rel
                ),
                Some(tol) => assert!(
                    gap.rel <= tol,
                    "{} ({path}): relative error {:e} > {tol:e}",
                    case.name,
                    gap.rel
                ),
            }
        }
    }
}

/// The strict bounds catch what a loose tolerance lets through: Adam with
/// the weight decay dropped, `b2 = 0.9999` for 0.999, or `eps` moved inside
/// the square root (Optax's `eps_root`), each run against the trace of
/// the real optimizer.
#[test]
fn optax_mutations_fail_the_strict_bounds() {
    let fixture = fixture();
    let case = |name: &str| fixture.cases.iter().find(|c| c.name == name).unwrap();
    let adamw_case = case("adamw_lr5e-2_wd1e-2");
    let adam_case = case("adam_lr5e-2");
    let mutants = [
        (
            "weight decay dropped",
            adamw_case,
            trace_error::<f32, _>(adamw_case, &adam(5e-2), true),
        ),
        (
            "b2 = 0.9999",
            adam_case,
            trace_error::<f32, _>(adam_case, &adam(5e-2).b2(0.9999), true),
        ),
        (
            "eps inside the square root",
            adam_case,
            eps_root_trace(adam_case, 5e-2, 1e-8),
        ),
    ];
    for (what, case, gap) in mutants {
        eprintln!(
            "{what}: relative error {:.1e} against {}",
            gap.rel, case.name
        );
        assert!(!gap.exact, "{what} reproduced {} bit for bit", case.name);
        // The bound `every_exact_trace_is_reproduced` holds this case to.
        assert_eq!(f32_bound(&case.name)[1], None);
    }
    // The same host arithmetic with `eps` outside is the real trace, bit
    // for bit: the mutation, not the reference, makes the difference.
    assert!(host_adam_trace(adam_case, 5e-2, 1e-8, false).exact);
}

/// Optax's `adam(lr, eps=0, eps_root=eps)`: [`host_adam_trace`] with `eps`
/// inside the square root.
fn eps_root_trace(case: &Case, lr: f64, eps: f64) -> Gap {
    host_adam_trace(case, lr, eps, true)
}

/// Optax's `adam(lr)` (b1 0.9, b2 0.999) in `f32` on the host, written out
/// in Optax's order of operations, against `case`'s trace; with `inside`,
/// `eps` is added under the square root instead of after it.
fn host_adam_trace(case: &Case, lr: f64, eps: f64, inside: bool) -> Gap {
    let (b1, b2) = (0.9f32, 0.999f32);
    let (w1, w2) = ((1.0 - 0.9f64) as f32, (1.0 - 0.999f64) as f32);
    let (lr, eps) = (lr as f32, eps as f32);
    let mut p: Vec<f32> = cast::<f32>(&case.init.w);
    p.extend(cast::<f32>(&case.init.b));
    let (mut m, mut v) = (vec![0f32; p.len()], vec![0f32; p.len()]);
    let mut gap = Gap {
        rel: 0.0,
        exact: true,
    };
    for (step, want) in case.params_after_each_step.iter().enumerate() {
        let t = (step + 1) as f64;
        let bc1 = 1.0 - (f64::from(b1).powf(t) as f32);
        let bc2 = 1.0 - (f64::from(b2).powf(t) as f32);
        let g = grads_at(case, step);
        let mut gs: Vec<f32> = cast::<f32>(&g.w);
        gs.extend(cast::<f32>(&g.b));
        for i in 0..p.len() {
            m[i] = w1 * gs[i] + b1 * m[i];
            v[i] = w2 * (gs[i] * gs[i]) + b2 * v[i];
            let d = if inside {
                (m[i] / bc1) / (v[i] / bc2 + eps).sqrt()
            } else {
                (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps)
            };
            p[i] -= d * lr;
        }
        let mut want_all = cast::<f32>(&want.w);
        want_all.extend(cast::<f32>(&want.b));
        let e = crate::fixture::max_rel_error(&p, &want_all, 1e-2);
        gap.rel = crate::fixture::worse(e, gap.rel);
        gap.exact &= p == want_all;
    }
    gap
}
/// A state saved after 5 steps and loaded into a fresh one resumes bit for
/// bit, with the saved keys `keys` (the host kernels' scratch buffer is not
/// saved).
fn resumes_bit_for_bit<T: GradientTransformation<f32, Cpu>>(case: &str, tx: T, keys: &[&str]) {
    let fixture = fixture();
    let case = fixture.cases.iter().find(|c| c.name == case).unwrap();
    let dev = Cpu::default();
    let mut a = model::<f32>(&dev, &case.init);
    let mut sa = tx.init_model(&a).unwrap();
    for step in 0..5 {
        let grads = grads_of(&a, &grads_at(case, step));
        tx.apply_model(&mut sa, grads, &mut a).unwrap();
    }
    let mut saved = StateMap::new();
    sa.save_state("opt.", &mut saved);
    let mut found: Vec<_> = saved.keys().cloned().collect();
    found.sort();
    assert_eq!(found, keys);
    let mut b = a.clone();
    let mut sb = tx.init_model(&b).unwrap();
    sb.load_state("opt.", &saved).unwrap();
    for step in 5..case.grads.len() {
        let g = grads_at(case, step);
        let grads = grads_of(&a, &g);
        tx.apply_model(&mut sa, grads, &mut a).unwrap();
        let grads = grads_of(&b, &g);
        tx.apply_model(&mut sb, grads, &mut b).unwrap();
    }
    assert_eq!(a.w.as_vec(), b.w.as_vec());
    assert_eq!(a.b.as_vec(), b.b.as_vec());
}

#[test]
fn exact_states_resume_bit_for_bit() {
    resumes_bit_for_bit(
        "adamw_cosine5e-2_12steps_wd1e-4",
        adamw(cosine_decay(5e-2, 12, 0.0), 1e-4),
        &["opt.count", "opt.mu.b", "opt.mu.w", "opt.nu.b", "opt.nu.w"],
    );
    resumes_bit_for_bit(
        "rmsprop_cosine5e-2_12steps_decay0.95_eps1e-6_centered_momentum0.5_nesterov",
        rmsprop(cosine_decay(5e-2, 12, 0.0))
            .decay(0.95)
            .eps(1e-6)
            .centered(true)
            .momentum(0.5)
            .nesterov(true),
        &[
            "opt.count",
            "opt.mu.b",
            "opt.mu.w",
            "opt.nu.b",
            "opt.nu.w",
            "opt.trace.b",
            "opt.trace.w",
        ],
    );
    resumes_bit_for_bit(
        "rmsprop_lr5e-2_momentum0.9",
        rmsprop(5e-2).momentum(0.9),
        &[
            "opt.count",
            "opt.nu.b",
            "opt.nu.w",
            "opt.trace.b",
            "opt.trace.w",
        ],
    );
    resumes_bit_for_bit(
        "adagrad_lr5e-2",
        adagrad(5e-2),
        &["opt.count", "opt.sum_of_squares.b", "opt.sum_of_squares.w"],
    );
    resumes_bit_for_bit(
        "lion_lr1e-2",
        lion(1e-2),
        &["opt.count", "opt.mu.b", "opt.mu.w"],
    );
    // Saved after a skipped step (2), resumed across two in a row (5, 6).
    resumes_bit_for_bit(
        "apply_if_finite_adam5e-2_max2",
        apply_if_finite(adam(5e-2), 2),
        &[
            "opt.inner.count",
            "opt.inner.mu.b",
            "opt.inner.mu.w",
            "opt.inner.nu.b",
            "opt.inner.nu.w",
            "opt.last_finite",
            "opt.notfinite_count",
            "opt.total_notfinite",
        ],
    );
}

/// Optax's counters over the `apply_if_finite` trace, and its escape
/// hatch: more than `max_consecutive_errors` non-finite steps in a row go
/// through.
#[test]
fn apply_if_finite_counts_as_optax() {
    let fixture = fixture();
    let case = fixture
        .cases
        .iter()
        .find(|c| c.name == "apply_if_finite_adam5e-2_max2")
        .unwrap();
    let tx = apply_if_finite(adam(5e-2), 2);
    let dev = Cpu::default();
    let mut m = model::<f32>(&dev, &case.init);
    let mut state = tx.init_model(&m).unwrap();
    let mut seen = Vec::new();
    for step in 0..case.grads.len() {
        let grads = grads_of(&m, &grads_at(case, step));
        tx.apply_model(&mut state, grads, &mut m).unwrap();
        seen.push((state.notfinite_count(), state.last_finite()));
    }
    assert_eq!(seen[2], (1, false));
    assert_eq!(seen[3], (0, true));
    assert_eq!(seen[6], (2, false));
    assert_eq!(state.total_notfinite(), 3);
    assert_eq!(state.inner().count(), 9, "skipped steps leave adam's count");

    let tx = apply_if_finite(sgd(0.1, None, false), 1);
    let mut m = model::<f32>(&dev, &case.init);
    let before = m.w.as_vec();
    let mut state = tx.init_model(&m).unwrap();
    let mut nan = case.grads[0].clone();
    nan.w.data[0] = f64::NAN;
    let grads = grads_of(&m, &nan);
    tx.apply_model(&mut state, grads, &mut m).unwrap();
    assert_eq!(m.w.as_vec(), before, "the first non-finite step is skipped");
    let grads = grads_of(&m, &nan);
    let updates = tx.update_model(&mut state, grads, &m).unwrap();
    apply_updates(&mut m, updates).unwrap();
    assert!(m.w.as_vec()[0].is_nan(), "the second one goes through");
    assert_eq!(state.notfinite_count(), 2);
}
