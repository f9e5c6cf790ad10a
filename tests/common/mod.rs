//! Shared helpers of the optimizer tests: the fixtures' `w` (3x4) / `b` (4)
//! parameter tree as a dfdx module.
#![allow(dead_code)]

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::cosine_decay;
use serde::Deserialize;

mod fixture;
use fixture::assert_rel;

/// The Optax fixtures' parameter tree: `w` (3x4) and `b` (4).
#[derive(Debug, Clone)]
pub struct Wb<E: Dtype, D: Storage<E>> {
    pub w: Tensor<Rank2<3, 4>, E, D>,
    pub b: Tensor<Rank1<4>, E, D>,
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

/// Builds gradients equal to `gw` / `gb` for `model` with one backward pass
/// (d/dw sum(w * gw) = gw exactly).
pub fn grads_of<E: Dtype, D: Device<E>>(model: &Wb<E, D>, gw: &[E], gb: &[E]) -> Gradients<E, D> {
    let dev = model.w.device().clone();
    let gw = dev.tensor_from_vec(gw.to_vec(), (Const::<3>, Const::<4>));
    let gb = dev.tensor_from_vec(gb.to_vec(), (Const::<4>,));
    let lw = (model.w.clone().traced(model.alloc_grads()) * gw).sum();
    let (lw, tape) = lw.split_tape();
    let lb = (model.b.clone().put_tape(tape) * gb).sum();
    (lb + lw).backward()
}

// ------------------------------------------------ Optax traces

#[derive(Deserialize)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

#[derive(Deserialize)]
pub struct Tree {
    pub w: Arr,
    pub b: Arr,
}

#[derive(Deserialize)]
pub struct Case {
    pub name: String,
    pub init: Tree,
    pub grads: Vec<Tree>,
    pub params_after_each_step: Vec<Tree>,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub cases: Vec<Case>,
}

fn run<D: Device<f32>, T: GradientTransformation<f32, D>>(dev: &D, case: &Case, tx: T) {
    run_path(dev, case, &tx, false);
    run_path(dev, case, &tx, true);
}

fn run_path<D: Device<f32>, T: GradientTransformation<f32, D>>(
    dev: &D,
    case: &Case,
    tx: &T,
    fused: bool,
) {
    assert_eq!(case.init.w.shape, [3, 4]);
    assert_eq!(case.init.b.shape, [4]);
    assert_eq!(case.grads.len(), case.params_after_each_step.len());
    let mut model = Wb {
        w: dev.tensor_from_vec(case.init.w.data.clone(), (Const::<3>, Const::<4>)),
        b: dev.tensor_from_vec(case.init.b.data.clone(), (Const::<4>,)),
    };
    let mut state = tx.init_model(&model).unwrap();
    for (step, (g, want)) in case
        .grads
        .iter()
        .zip(&case.params_after_each_step)
        .enumerate()
    {
        let grads = grads_of(&model, &g.w.data, &g.b.data);
        // The gradients are the fixture's, exactly (see the module docs).
        assert_eq!(
            grads.get(&model.w).as_vec(),
            g.w.data,
            "{} grads w",
            case.name
        );
        assert_eq!(
            grads.get(&model.b).as_vec(),
            g.b.data,
            "{} grads b",
            case.name
        );
        if fused {
            tx.apply_model(&mut state, grads, &mut model).unwrap();
        } else {
            let updates = tx.update_model(&mut state, grads, &model).unwrap();
            apply_updates(&mut model, updates).unwrap();
        }
        let what = format!("{} step {} (fused: {fused})", case.name, step + 1);
        assert_rel(
            &format!("{what} w"),
            &model.w.as_vec(),
            &want.w.data,
            1e-5,
            1e-2,
        );
        assert_rel(
            &format!("{what} b"),
            &model.b.as_vec(),
            &want.b.data,
            1e-5,
            1e-2,
        );
    }
}

/// Every trace of `tests/fixtures/optax_traces.json`, through both apply
/// paths (`update_model` + `apply_updates`, and the fused `apply_model`
/// that `TrainState` uses), on `dev`, within
/// `1e-5 * max(|optax|, 1e-2)` after every step.
pub fn every_optax_trace<D: Device<f32>>(dev: &D) {
    let fixture: Fixture =
        serde_json::from_str(include_str!("../fixtures/optax_traces.json")).unwrap();
    assert_eq!(fixture.cases.len(), 8, "a new case needs a line here");
    for case in &fixture.cases {
        match case.name.as_str() {
            "sgd_lr0.1" => run(dev, case, sgd(0.1, None, false)),
            "sgd_lr0.1_momentum0.9" => run(dev, case, sgd(0.1, Some(0.9), false)),
            "sgd_lr0.1_nesterov0.9" => run(dev, case, sgd(0.1, Some(0.9), true)),
            "adam_lr1e-3" => run(dev, case, adam(1e-3)),
            "adamw_lr1e-3_wd1e-2" => run(dev, case, adamw(1e-3, 1e-2)),
            "rmsprop_lr1e-2" => run(dev, case, rmsprop(1e-2)),
            "chain_clip1.0_adamw_cosine1e-3_10steps" => run(
                dev,
                case,
                chain((
                    clip_by_global_norm(1.0),
                    adamw(cosine_decay(1e-3, 10, 0.0), 1e-4),
                )),
            ),
            "multisteps5_adam_lr1e-2" => run(dev, case, multi_steps(5, adam(1e-2))),
            other => panic!("no flaxen equivalent registered for fixture case {other}"),
        }
    }
}
