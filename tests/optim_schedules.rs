//! Every schedule of `tests/fixtures/optax_schedules.json` (Optax 0.2.8,
//! steps 0..=120) reproduced within 1e-5 relative.

#[path = "common/fixture.rs"]
mod fixture;

use flaxen::runtime::schedule::*;
use std::collections::BTreeMap;

fn check<S: Schedule>(name: &str, want: &[f64], s: S) {
    assert_eq!(want.len(), 121, "{name}");
    let got: Vec<f64> = (0..want.len()).map(|step| s.value(step as u64)).collect();
    // Relative to the value alone (floor 0): a schedule that reaches zero
    // must reach it exactly.
    fixture::assert_rel(&format!("{name}, steps"), &got, want, 1e-5, 0.0);
}

#[test]
fn every_optax_schedule_is_reproduced() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/optax_schedules.json"
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let all: BTreeMap<String, Vec<f64>> = serde_json::from_value(v["schedules"].clone()).unwrap();
    assert_eq!(all.len(), 7);
    for (name, want) in &all {
        match name.as_str() {
            "cosine_decay_schedule(init_value=1e-3, decay_steps=100, alpha=0.0)" => {
                check(name, want, cosine_decay(1e-3, 100, 0.0))
            }
            "cosine_decay_schedule(init_value=1e-3, decay_steps=100, alpha=0.1)" => {
                check(name, want, cosine_decay(1e-3, 100, 0.1))
            }
            "warmup_cosine_decay_schedule(init_value=0.0, peak_value=1e-3, warmup_steps=10, decay_steps=100, end_value=1e-5)" => {
                check(name, want, warmup_cosine_decay(0.0, 1e-3, 10, 100, 1e-5))
            }
            "exponential_decay(init_value=1e-2, transition_steps=10, decay_rate=0.5)" => {
                check(name, want, exponential_decay(1e-2, 10, 0.5, false))
            }
            "exponential_decay(init_value=1e-2, transition_steps=10, decay_rate=0.5, staircase=True)" => {
                check(name, want, exponential_decay(1e-2, 10, 0.5, true))
            }
            "linear_schedule(init_value=1e-3, end_value=0.0, transition_steps=50)" => {
                check(name, want, linear(1e-3, 0.0, 50))
            }
            "piecewise_constant_schedule(init_value=0.1, boundaries_and_scales={30: 0.1, 60: 0.1})" => {
                check(name, want, piecewise_constant(0.1, &[(30, 0.1), (60, 0.1)]))
            }
            other => panic!("no flaxen equivalent registered for fixture schedule {other}"),
        }
    }
}

/// Every optimizer with a learning rate reports the one its schedule gave
/// its last update (Optax's `inject_hyperparams` reading), also through a
/// chain and the wrappers, and after its state is saved and loaded.
#[test]
fn optimizers_report_the_learning_rate_of_their_last_update() {
    use flaxen::runtime::dfdx::prelude::*;
    use flaxen::runtime::optim::*;
    use flaxen::runtime::state::{StateDict, StateMap};

    fn run<T: GradientTransformation<f32, Cpu>>(name: &str, tx: T) {
        let dev = Cpu::seed_from_u64(1);
        let mut model = dev.build_module::<Linear<4, 3>, f32>();
        let mut state = tx.init_model(&model).unwrap();
        let sched = linear(1.0, 0.0, 10);
        assert_eq!(tx.learning_rate(&state), Some(sched.value(0)), "{name}");
        for k in 1..=4u64 {
            let x: Tensor<Rank2<2, 4>, f32, _> = dev.sample_normal();
            let grads = model.forward(x.leaky_trace()).square().mean().backward();
            tx.apply_model(&mut state, grads, &mut model).unwrap();
            assert_eq!(
                tx.learning_rate(&state),
                Some(sched.value(k - 1)),
                "{name}, update {k}"
            );
        }
        let mut saved = StateMap::new();
        state.save_state("opt.", &mut saved);
        let mut counters = StateMap::new();
        state.save_counters("opt.", &mut counters);
        let mut fresh = tx.init_model(&model).unwrap();
        fresh.load_state("opt.", &saved).unwrap();
        fresh.load_counters("opt.", &counters).unwrap();
        assert_eq!(
            tx.learning_rate(&fresh),
            Some(sched.value(3)),
            "{name}, loaded"
        );
    }
    let lr = || linear(1.0, 0.0, 10);
    run("adam", adam(lr()));
    run("adamw", adamw(lr(), 1e-2));
    run("sgd", sgd(lr(), Some(0.9), false));
    run("rmsprop", rmsprop(lr()));
    run("adagrad", adagrad(lr()));
    run("adabelief", adabelief(lr()));
    run("lamb", lamb(lr()));
    run("lion", lion(lr()));
    run("adafactor", adafactor(lr()));
    run("chain", chain((clip_by_global_norm(1.0), adam(lr()))));
    run("apply_if_finite", apply_if_finite(adam(lr()), 2));
    run("multi_steps(1)", multi_steps(1, adam(lr())));
    run("masked", masked(adam(lr()), |k| k.ends_with("weight")));
    // Without a learning rate: none.
    let tx = chain((clip_by_global_norm(1.0), scale(-0.1)));
    let model = Cpu::default().build_module::<Linear<4, 3>, f32>();
    let state = tx.init_model(&model).unwrap();
    assert_eq!(
        GradientTransformation::<f32, Cpu>::learning_rate(&tx, &state),
        None
    );
}
