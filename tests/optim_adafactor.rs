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

#[path = "common/fixture.rs"]
mod fixture;

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::state::{StateDict, StateMap};

#[path = "common/optax_tree.rs"]
mod optax_tree;
use optax_tree::{load, train_state_round_trips, Cosine, Fixture, Tree, TreeNet};

optax_tree::tree_net!(
    /// The tree of `optax_adafactor.json`: the five leaves of the other
    /// Optax fixtures and `dense_1.weight`, whose largest dimension comes
    /// first (a factored moment must pick the dimensions by size).
    Net {
        conv_w: "conv_0.weight", Rank4<3, 2, 3, 3>;
        conv_b: "conv_0.bias", Rank1<3>;
        dense_w: "dense_0.weight", Rank2<5, 7>;
        dense_b: "dense_0.bias", Rank1<5>;
        ln_scale: "layer_norm_0.scale", Rank1<7>;
        dense1_w: "dense_1.weight", Rank2<7, 3>;
    }
);

fn fixture() -> Fixture {
    load(include_str!("fixtures/optax_adafactor.json"))
}

fn model<E: Dtype>(dev: &Cpu, t: &Tree) -> Net<E, Cpu>
where
    Cpu: Device<E>,
{
    Net::from_tree(dev, t)
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
    optax_tree::every_trace!(fixture(), 10);
}

/// The state of `tx` on the case `name` resumes bit for bit through a
/// checkpoint; the saved keys are `keys`.
fn resumes_bit_for_bit<T: GradientTransformation<f32, Cpu>>(name: &str, tx: T, keys: &[&str]) {
    let fixture = fixture();
    let case = fixture.case(name);
    optax_tree::resumes_bit_for_bit(case, model(&Cpu::default(), &case.init), tx, keys);
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
    let fixture = fixture();
    let case = &fixture.cases[0];
    let tx = adafactor(1e-2).min_dim_size_to_factor(3);
    train_state_round_trips(case, model(&Cpu::default(), &case.init), tx);
}
