//! Every trace of `tests/fixtures/optax_traces.json` (Optax 0.2.8)
//! reproduced by flaxen's optimizers within 1e-5 relative.

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

/// Runs the case twice: through `update_model` + `apply_updates`, and
/// through `apply_model` (the fused in-place path `TrainState` uses).
fn run<T: GradientTransformation<f32, Cpu>>(case: &Case, tx: T) {
    run_path(case, &tx, false);
    run_path(case, &tx, true);
}

fn run_path<T: GradientTransformation<f32, Cpu>>(case: &Case, tx: &T, fused: bool) {
    assert_eq!(case.init.w.shape, [3, 4]);
    assert_eq!(case.init.b.shape, [4]);
    let dev: Cpu = Default::default();
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
        if fused {
            tx.apply_model(&mut state, grads, &mut model).unwrap();
        } else {
            let updates = tx.update_model(&mut state, grads, &model).unwrap();
            apply_updates(&mut model, updates).unwrap();
        }
        let what = format!("{} step {} (fused: {fused})", case.name, step + 1);
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
fn every_optax_trace_is_reproduced() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/optax_traces.json"
    ))
    .unwrap();
    let fixture: Fixture = serde_json::from_str(&text).unwrap();
    assert_eq!(fixture.cases.len(), 8);
    for case in &fixture.cases {
        match case.name.as_str() {
            "sgd_lr0.1" => run(case, sgd(0.1, None, false)),
            "sgd_lr0.1_momentum0.9" => run(case, sgd(0.1, Some(0.9), false)),
            "sgd_lr0.1_nesterov0.9" => run(case, sgd(0.1, Some(0.9), true)),
            "adam_lr1e-3" => run(case, adam(1e-3)),
            "adamw_lr1e-3_wd1e-2" => run(case, adamw(1e-3, 1e-2)),
            "rmsprop_lr1e-2" => run(case, rmsprop(1e-2)),
            "chain_clip1.0_adamw_cosine1e-3_10steps" => run(
                case,
                chain((
                    clip_by_global_norm(1.0),
                    adamw(cosine_decay(1e-3, 10, 0.0), 1e-4),
                )),
            ),
            "multisteps5_adam_lr1e-2" => run(case, multi_steps(5, adam(1e-2))),
            other => panic!("no flaxen equivalent registered for fixture case {other}"),
        }
    }
}
