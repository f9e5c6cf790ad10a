//! Every trace of `tests/fixtures/optax_traces.json` (Optax 0.2.8) reproduced
//! by flaxen's optimizers on dfdx's `Cuda` device, through both apply paths
//! (`update_model` + `apply_updates`, and the fused in-place `apply_model`
//! that `TrainState` uses), as `tests/optim_optax.rs` does on `Cpu`.
//!
//! Tolerance: the Cpu test's, `|cuda - optax| <= 1e-5 * max(|optax|, 1e-2)`
//! per element after every step. Why Cuda needs nothing looser: the fixture
//! gives the gradients, and `grads_of` reproduces them exactly on the device
//! (the backward of `sum(w * g)` is `g` times one), so no matmul or
//! reduction order enters the gradients. What differs from the CPU is inside
//! dfdx's fused elementwise kernels (compiled by nvcc without fast-math, so
//! IEEE `sqrtf` and division): `powf(beta, t)` instead of `powi`, a division
//! instead of a multiplication by the reciprocal, and fused multiply-adds,
//! each worth an ulp or two of the *update*; the updates are at most `lr`
//! (1e-1 for sgd, 1e-2..1e-3 for the others) times O(1), so after the 12
//! steps of a trace the parameters differ from the Cpu's by ~1e-8 at most,
//! inside 1e-7 (the smallest tolerance, at the 1e-2 floor); every fixture
//! gradient is at least 1.6e-3 in magnitude, far from Adam's eps (1e-8),
//! so no near-zero gradient amplifies a rounding difference. `clip_by_global_norm` sums squares
//! with a block reduction in another order than the CPU: again an ulp.
//!
//! Without a GPU this file still has to compile: see docs/cuda.md.
#![cfg(feature = "cuda")]

mod common;

use common::{assert_close, grads_of, Wb};
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::cosine_decay;
use serde::Deserialize;

#[derive(Deserialize)]
struct Arr {
    shape: Vec<usize>,
    data: Vec<f32>,
}

#[derive(Deserialize)]
struct Tree {
    w: Arr,
    b: Arr,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    init: Tree,
    grads: Vec<Tree>,
    params_after_each_step: Vec<Tree>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

fn run<T: GradientTransformation<f32, Cuda>>(dev: &Cuda, case: &Case, tx: T) {
    run_path(dev, case, &tx, false);
    run_path(dev, case, &tx, true);
}

fn run_path<T: GradientTransformation<f32, Cuda>>(dev: &Cuda, case: &Case, tx: &T, fused: bool) {
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
        let what = format!("cuda {} step {} (fused: {fused})", case.name, step + 1);
        assert_close(
            &format!("{what} w"),
            &model.w.as_vec(),
            &want.w.data,
            1e-5,
            1e-2,
        );
        assert_close(
            &format!("{what} b"),
            &model.b.as_vec(),
            &want.b.data,
            1e-5,
            1e-2,
        );
    }
}

#[test]
fn every_optax_trace_is_reproduced_on_cuda() {
    let fixture: Fixture =
        serde_json::from_str(include_str!("fixtures/optax_traces.json")).unwrap();
    assert_eq!(fixture.cases.len(), 8, "a new case needs a line here");
    let dev = Cuda::default();
    for case in &fixture.cases {
        match case.name.as_str() {
            "sgd_lr0.1" => run(&dev, case, sgd(0.1, None, false)),
            "sgd_lr0.1_momentum0.9" => run(&dev, case, sgd(0.1, Some(0.9), false)),
            "sgd_lr0.1_nesterov0.9" => run(&dev, case, sgd(0.1, Some(0.9), true)),
            "adam_lr1e-3" => run(&dev, case, adam(1e-3)),
            "adamw_lr1e-3_wd1e-2" => run(&dev, case, adamw(1e-3, 1e-2)),
            "rmsprop_lr1e-2" => run(&dev, case, rmsprop(1e-2)),
            "chain_clip1.0_adamw_cosine1e-3_10steps" => run(
                &dev,
                case,
                chain((
                    clip_by_global_norm(1.0),
                    adamw(cosine_decay(1e-3, 10, 0.0), 1e-4),
                )),
            ),
            "multisteps5_adam_lr1e-2" => run(&dev, case, multi_steps(5, adam(1e-2))),
            other => panic!("no flaxen equivalent registered for fixture case {other}"),
        }
    }
}
