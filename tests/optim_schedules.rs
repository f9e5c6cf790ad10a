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
