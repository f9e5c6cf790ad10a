//! `tests/fixtures/flax_compact_v2.json` (three Flax linen models with
//! random parameters, float64, made by
//! `tests/python/make_flax_compact_v2.py`) and the checks that run a flaxen
//! model against one of its cases: load the fixture's tensors by checkpoint
//! key, run forward and the backward pass of `loss = sum(y * r)`, compare
//! the output, the input gradient, every parameter's gradient (by key), the
//! updated running statistics and the parameter count.
//!
//! Include next to `norm_act.rs`, whose tolerance it uses (f64 `1e-9`, f32
//! `1e-4`, relative to `max(|flax|, 1)`):
//!
//! ```ignore
//! #[path = "common/norm_act.rs"]
//! mod norm_act;
//! #[path = "common/compact_v2.rs"]
//! mod compact_v2;
//! ```
#![allow(dead_code)]

use std::collections::BTreeMap;

use flaxen::prelude::*;
use flaxen::runtime::checkpoint::{load_module_state, save_module_state};
use flaxen::runtime::dfdx::nn::tensor_collection::TensorCollection;
use flaxen::runtime::optim::Params;
use flaxen::runtime::state::HostTensor;
use serde::Deserialize;

use crate::norm_act::{assert_flax, cast, Arr};

/// One model of the fixture. Every map is keyed by flaxen's checkpoint key
/// (`conv_0.weight`, `encoder_block_1.self_attention_0.query.bias`, ...),
/// tensors in flaxen's layout.
#[derive(Deserialize)]
pub struct ModelCase {
    /// The Flax model and its attributes.
    pub model: String,
    pub x: Arr,
    pub r: Arr,
    /// The trainable parameters.
    pub params: BTreeMap<String, Arr>,
    /// BatchNorm's running statistics before the forward pass.
    #[serde(default)]
    pub batch_stats: BTreeMap<String, Arr>,
    /// Flax's path of every key (`Conv_0/kernel`), for the reader.
    pub flax_paths: BTreeMap<String, String>,
    /// Flax's parameter count (`params` only).
    pub num_params: usize,
    /// Training mode where the model has BatchNorm.
    pub y: Arr,
    pub grad_x: Arr,
    pub grads: BTreeMap<String, Arr>,
    /// The running statistics after the training-mode forward pass.
    pub batch_stats_after: Option<BTreeMap<String, Arr>>,
    /// Inference (`use_running_average=True` with `batch_stats`).
    pub eval_y: Option<Arr>,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub stage: ModelCase,
    pub encoder: ModelCase,
    pub mlp: ModelCase,
}

pub fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../fixtures/flax_compact_v2.json")).expect("fixture parses")
}

/// Loads the case's parameters and running statistics into `model` through
/// its checkpoint keys (see [`load_tensors`]).
pub fn load<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(model: &mut M, case: &ModelCase) {
    load_tensors(
        model,
        &case.model,
        case.params.iter().chain(&case.batch_stats),
    );
}

/// Loads fixture tensors into `model` through its checkpoint keys: every
/// tensor of the model must be among them, with its shape, and every one
/// of them in the model.
pub fn load_tensors<'a, E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    model: &mut M,
    what: &str,
    tensors: impl Iterator<Item = (&'a String, &'a Arr)>,
) {
    let mut n = 0;
    let state: StateMap<E> = tensors
        .inspect(|_| n += 1)
        .map(|(k, a)| {
            let t = HostTensor {
                shape: a.shape.clone(),
                data: cast(a),
            };
            (k.clone(), t)
        })
        .collect();
    assert_eq!(state.len(), n, "{what}: a key is given twice");
    load_module_state(model, "", &state)
        .unwrap_or_else(|e| panic!("{what}: the fixture does not fit the model: {e:?}"));
}

/// Every trainable tensor's gradient in `grads` against the fixture's, by
/// key; the model's trainable keys must be exactly the fixture's.
pub fn assert_grads<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    what: &str,
    model: &M,
    grads: &Gradients<E, D>,
    case: &ModelCase,
) {
    assert_param_grads(what, model, grads, &case.grads);
}

/// Every trainable tensor's gradient in `grads` against `want`, by key; the
/// model's trainable keys must be exactly `want`'s.
pub fn assert_param_grads<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    what: &str,
    model: &M,
    grads: &Gradients<E, D>,
    want_grads: &BTreeMap<String, Arr>,
) {
    let params = Params::of(model).unwrap();
    let names = &params.info().names;
    let want: Vec<&String> = want_grads.keys().collect();
    let mut got: Vec<&String> = names.iter().collect();
    got.sort();
    assert_eq!(got, want, "{what}: trainable keys");
    // The leaves are views of the model's tensors (same ids), so `grads`
    // holds their gradients.
    for (name, leaf) in names.iter().zip(params.leaves()) {
        assert_flax(
            &format!("{what} grad {name}"),
            &grads.get(leaf).as_vec(),
            &want_grads[name],
        );
    }
}

/// The tensors of `model` named in `want` (e.g. running statistics) against
/// their values there.
pub fn assert_state<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    what: &str,
    model: &M,
    want: &BTreeMap<String, Arr>,
) {
    let mut live = StateMap::new();
    save_module_state(model, "", &mut live);
    for (k, w) in want {
        let got = live
            .get(k)
            .unwrap_or_else(|| panic!("{what}: the model has no `{k}`"));
        assert_eq!(got.shape, w.shape, "{what} {k}: shape");
        assert_flax(&format!("{what} {k}"), &got.data, w);
    }
}

/// Runs `$case` of the fixture through the flaxen model `$model` in dtype
/// `$e` on `$dev`, input shape `$x` and output shape `$y` (batch first):
/// loads the parameters by key, checks the parameter count, then
/// `$forward` (`forward`, or `forward_mut` for BatchNorm's training mode) on
/// a traced input; checks the output, `d loss / d x`, every parameter
/// gradient and, when the case has them, the updated running statistics.
macro_rules! check_case {
    ($dev:expr, $model:ty, $e:ty, $case:expr, $x:ty, $y:ty, $forward:ident) => {{
        use $crate::compact_v2::{assert_grads, assert_state, load, ModelCase};
        use $crate::norm_act::{assert_flax, tensor};
        let dev = $dev;
        let case: &ModelCase = $case;
        let what = |s: &str| format!("{} {} {s}", case.model, stringify!($e));
        let mut m = dev.build_module::<$model, $e>();
        load(&mut m, case);
        assert_eq!(
            m.num_trainable_params(),
            case.num_params,
            "{}",
            what("parameter count")
        );
        let x: Tensor<$x, $e, _> = tensor(dev, &case.x);
        let r: Tensor<$y, $e, _> = tensor(dev, &case.r);

        let y = m.$forward(x.leaky_trace());
        assert_flax(&what("y"), &y.as_vec(), &case.y);
        let g = (y * r).sum().backward();
        assert_flax(&what("grad x"), &g.get(&x).as_vec(), &case.grad_x);
        assert_grads(&what(""), &m, &g, case);
        if let Some(after) = &case.batch_stats_after {
            assert_state(&what("updated"), &m, after);
        }
    }};
}

/// Inference of `$case` (input shape `$x`): `forward` without a tape, with
/// the fixture's running statistics, which it must leave alone.
macro_rules! check_eval {
    ($dev:expr, $model:ty, $e:ty, $case:expr, $x:ty) => {{
        use $crate::compact_v2::{assert_state, load, ModelCase};
        use $crate::norm_act::{assert_flax, tensor};
        let dev = $dev;
        let case: &ModelCase = $case;
        let what = |s: &str| format!("{} {} {s}", case.model, stringify!($e));
        let mut m = dev.build_module::<$model, $e>();
        load(&mut m, case);
        let x: Tensor<$x, $e, _> = tensor(dev, &case.x);
        let y = m.forward(x);
        let want = case
            .eval_y
            .as_ref()
            .expect("the case has no inference output");
        assert_flax(&what("eval y"), &y.as_vec(), want);
        assert_state(&what("eval keeps"), &m, &case.batch_stats);
    }};
}

pub(crate) use {check_case, check_eval};
