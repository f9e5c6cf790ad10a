//! Optimizer states saved and loaded through `StateDict` resume bit for bit,
//! for every transformation (each on its own, outside a `TrainState`).

mod common;

use common::{grads_of, Wb};
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::{exponential_decay, linear};
use flaxen::runtime::state::{StateDict, StateError, StateMap};

fn model(dev: &Cpu) -> Wb<f32, Cpu> {
    Wb {
        w: dev.sample_normal(),
        b: dev.sample_normal(),
    }
}

fn step<T: GradientTransformation<f32, Cpu>>(
    tx: &T,
    state: &mut T::State,
    m: &mut Wb<f32, Cpu>,
    k: usize,
) {
    let gw: Vec<f32> = (0..12)
        .map(|i| ((i * 7 + k * 3) % 5) as f32 - 2.0)
        .collect();
    let gb: Vec<f32> = (0..4).map(|i| ((i + k) % 3) as f32 - 1.0).collect();
    let grads = grads_of(m, &gw, &gb);
    tx.apply_model(state, grads, m).unwrap();
}

fn round_trip<T: GradientTransformation<f32, Cpu>>(tx: T, keys: &[&str]) {
    let dev: Cpu = Cpu::seed_from_u64(8);
    let mut a = model(&dev);
    let mut sa = tx.init_model(&a).unwrap();
    for k in 0..4 {
        step(&tx, &mut sa, &mut a, k);
    }
    let mut saved = StateMap::new();
    sa.save_state("opt.", &mut saved);
    for key in keys {
        assert!(
            saved.contains_key(*key),
            "{key} missing in {:?}",
            saved.keys()
        );
    }

    let mut b = a.clone();
    let mut sb = tx.init_model(&b).unwrap();
    // A broken map is refused and changes nothing.
    let mut broken = saved.clone();
    broken.remove(keys[keys.len() - 1]);
    assert!(matches!(
        sb.load_state("opt.", &broken),
        Err(StateError::Missing { .. })
    ));
    sb.load_state("opt.", &saved).unwrap();
    for k in 4..9 {
        step(&tx, &mut sa, &mut a, k);
        step(&tx, &mut sb, &mut b, k);
    }
    assert_eq!(a.w.as_vec(), b.w.as_vec());
    assert_eq!(a.b.as_vec(), b.b.as_vec());
}

#[test]
fn every_state_round_trips() {
    round_trip(
        sgd(0.1, Some(0.9), true),
        &["opt.count", "opt.trace.w", "opt.trace.b"],
    );
    round_trip(
        sgd(exponential_decay(0.1, 2, 0.5, false), None, false),
        &["opt.count"],
    );
    round_trip(rmsprop(1e-2), &["opt.count", "opt.nu.w"]);
    round_trip(adamw(1e-2, 1e-2), &["opt.count", "opt.mu.w", "opt.nu.b"]);
    round_trip(
        chain((
            clip_by_global_norm(1.0),
            scale_by_schedule(linear(-0.1, 0.0, 10)),
            scale(0.5),
        )),
        &["opt.1.count"],
    );
    round_trip(
        multi_steps(3, chain((add_decayed_weights(1e-3), adam(1e-2)))),
        &[
            "opt.mini_step",
            "opt.gradient_step",
            "opt.acc_grads.w",
            "opt.inner.1.count",
            "opt.inner.1.mu.w",
        ],
    );
}

/// Adam keeps each parameter's values in its direction buffer between
/// steps, and copies the parameter out again only when it may have
/// changed. A parameter written (`copy_from`) or replaced between two
/// steps, or shared with a clone the caller keeps, is read as it is now:
/// each run equals one whose optimizer state was cloned before the second
/// step (a clone of the state keeps nothing, so it copies every parameter).
#[test]
fn adam_reads_a_parameter_changed_between_steps() {
    let tx = adam(0.3);
    let new_w: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
    for change in ["copy_from", "replace", "clone kept", "none"] {
        let run = |fresh_state: bool| {
            let dev = Cpu::seed_from_u64(9);
            let mut m = model(&dev);
            let mut s = tx.init_model(&m).unwrap();
            let mut kept = None;
            step(&tx, &mut s, &mut m, 0);
            match change {
                "copy_from" => m.w.copy_from(&new_w),
                "replace" => m.w = dev.tensor_from_vec(new_w.clone(), *m.w.shape()),
                "clone kept" => kept = Some(m.w.clone()),
                _ => {}
            }
            if fresh_state {
                s = s.clone();
            }
            step(&tx, &mut s, &mut m, 1);
            step(&tx, &mut s, &mut m, 2);
            drop(kept);
            (m.w.as_vec(), m.b.as_vec())
        };
        let (a, b) = (run(false), run(true));
        assert_eq!(a, b, "{change}");
    }
}
