//! Optax 0.2.8 traces at large and small learning rates
//! (`tests/fixtures/optax_exact.json`, written by
//! `tests/python/make_optax_exact.py`): 12 steps on a `w` (5x3), `b` (7)
//! tree, in `f32` and `f64`, reproduced through both apply paths within
//! 1e-5 (`f32`) and 1e-6 (`f64`) relative, `|got - want| <= rel *
//! max(|want|, 1e-2)`. These need Optax's rounding of Adam's constants; the
//! same traces with dfdx's (PyTorch's) arithmetic are printed for
//! comparison.

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::cosine_decay;
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

#[derive(Deserialize)]
struct Arr {
    shape: Vec<usize>,
    data: Vec<f64>,
}

#[derive(Deserialize)]
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

/// Largest `|got - want| / max(|want|, 1e-2)` over the trace's steps.
fn trace_error<E: Dtype, T: GradientTransformation<E, Cpu>>(case: &Case, tx: &T, fused: bool) -> f64
where
    Cpu: Device<E>,
{
    let dev = Cpu::default();
    let mut m = model::<E>(&dev, &case.init);
    let mut state = tx.init_model(&m).unwrap();
    let mut worst = 0.0f64;
    for (g, want) in case.grads.iter().zip(&case.params_after_each_step) {
        let grads = grads_of(&m, g);
        if fused {
            tx.apply_model(&mut state, grads, &mut m).unwrap();
        } else {
            let updates = tx.update_model(&mut state, grads, &m).unwrap();
            apply_updates(&mut m, updates).unwrap();
        }
        for (got, want) in [(m.w.as_vec(), &want.w), (m.b.as_vec(), &want.b)] {
            for (g, w) in got.iter().zip(&want.data) {
                let g = g.to_f64().unwrap();
                worst = worst.max((g - w).abs() / w.abs().max(1e-2));
            }
        }
    }
    worst
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
                let $tx = adamw(cosine_decay(5e-2, 12, 0.0), 1e-4).pytorch_arithmetic(pt);
                $body
            }
            "chain_clip0.5_adam2e-2" => {
                let $tx = chain((clip_by_global_norm(0.5), adam(2e-2).pytorch_arithmetic(pt)));
                $body
            }
            other => panic!("no flaxen equivalent registered for fixture case {other}"),
        }
    }};
}

fn errors(case: &Case, pytorch: bool) -> [f64; 2] {
    [false, true].map(|fused| match case.dtype.as_str() {
        "f32" => with_tx!(case, pytorch, |tx| trace_error::<f32, _>(case, &tx, fused)),
        "f64" => with_tx!(case, pytorch, |tx| trace_error::<f64, _>(case, &tx, fused)),
        other => panic!("dtype {other}"),
    })
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("fixtures/optax_exact.json")).unwrap()
}

#[test]
fn every_exact_trace_is_reproduced() {
    let fixture = fixture();
    assert_eq!(fixture.cases.len(), 12, "a new case needs a line here");
    for case in &fixture.cases {
        let tol = if case.dtype == "f64" { 1e-6 } else { 1e-5 };
        let exact = errors(case, false);
        let pytorch = errors(case, true);
        eprintln!(
            "{:45} max rel error (two-step, fused): optax arithmetic {:.1e} {:.1e}, \
             pytorch arithmetic {:.1e} {:.1e}",
            case.name, exact[0], exact[1], pytorch[0], pytorch[1]
        );
        for (path, e) in ["update_model + apply_updates", "apply_model"]
            .iter()
            .zip(exact)
        {
            assert!(
                e <= tol,
                "{} ({path}): relative error {e:e} > {tol:e}",
                case.name
            );
        }
    }
}

/// A state saved after 5 steps and loaded into a fresh one resumes bit for
/// bit (Optax's arithmetic keeps its direction in an unsaved scratch
/// buffer, so the saved keys are unchanged).
#[test]
fn exact_adam_resumes_bit_for_bit() {
    let fixture = fixture();
    let case = fixture
        .cases
        .iter()
        .find(|c| c.name == "adamw_cosine5e-2_12steps_wd1e-4")
        .unwrap();
    let tx = adamw(cosine_decay(5e-2, 12, 0.0), 1e-4);
    let dev = Cpu::default();
    let mut a = model::<f32>(&dev, &case.init);
    let mut sa = tx.init_model(&a).unwrap();
    let (first, rest) = case.grads.split_at(5);
    for g in first {
        let grads = grads_of(&a, g);
        tx.apply_model(&mut sa, grads, &mut a).unwrap();
    }
    let mut saved = StateMap::new();
    sa.save_state("opt.", &mut saved);
    let mut keys: Vec<_> = saved.keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["opt.count", "opt.mu.b", "opt.mu.w", "opt.nu.b", "opt.nu.w"]
    );
    let mut b = a.clone();
    let mut sb = tx.init_model(&b).unwrap();
    sb.load_state("opt.", &saved).unwrap();
    for g in rest {
        let grads = grads_of(&a, g);
        tx.apply_model(&mut sa, grads, &mut a).unwrap();
        let grads = grads_of(&b, g);
        tx.apply_model(&mut sb, grads, &mut b).unwrap();
    }
    assert_eq!(a.w.as_vec(), b.w.as_vec());
    assert_eq!(a.b.as_vec(), b.b.as_vec());
}
