//! `tests/fixtures/flax_rnn.json` (Flax linen `nn.RNN` over `LSTMCell`,
//! `GRUCell` and `SimpleCell` with `reverse`, `keep_order` and
//! `return_carry`, float64, made by `tests/python/make_flax_rnn.py`) and the
//! check that runs flaxen's [`Rnn`](flaxen::runtime::layers::Rnn) against
//! every case on a device: parameters loaded by checkpoint key, output with
//! and without a tape, the input gradient and every parameter's gradient by
//! key for `loss = sum(y * r)`, and Flax's parameter count.
//!
//! Tolerance: `|flaxen - flax| <= tol * max(|flax|, 1)` per element, `tol`
//! 1e-9 in f64 and 1e-4 in f32.
//!
//! ```ignore
//! #[path = "common/rnn.rs"]
//! #[macro_use]
//! mod rnn;
//! rnn::all_rnn_cases!(&Cpu::default(), f64);
//! ```
#![allow(dead_code)]

use std::collections::BTreeMap;

use flaxen::prelude::*;
use flaxen::runtime::checkpoint::load_module_state;
use flaxen::runtime::dfdx::nn::tensor_collection::TensorCollection;
use flaxen::runtime::optim::Params;
use flaxen::runtime::state::HostTensor;
use serde::Deserialize;

#[derive(Deserialize)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

/// One `RNN(cell(features), reverse, keep_order, return_carry)` case; the
/// maps are keyed by flaxen's key relative to the RNN (`ii.weight`), tensors
/// in flaxen's layout.
#[derive(Deserialize)]
pub struct RnnCase {
    pub layer: String,
    pub cell: String,
    pub features: usize,
    pub reverse: bool,
    pub keep_order: bool,
    pub return_carry: bool,
    pub x: Arr,
    pub r: Arr,
    pub params: BTreeMap<String, Arr>,
    /// Flax's path of every key (`LSTMCell_0/ii/kernel`), for the reader.
    pub flax_paths: BTreeMap<String, String>,
    pub num_params: usize,
    pub y: Arr,
    pub grad_x: Arr,
    pub grads: BTreeMap<String, Arr>,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub cases: Vec<RnnCase>,
}

pub fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../fixtures/flax_rnn.json")).expect("fixture parses")
}

pub fn cast<E: Dtype>(a: &Arr) -> Vec<E> {
    a.data.iter().map(|&v| E::from_f64(v).unwrap()).collect()
}

/// The tolerance of the module docs.
pub fn assert_flax<E: Dtype>(what: &str, got: &[E], want: &Arr) {
    let tol = if std::mem::size_of::<E>() == 8 {
        1e-9
    } else {
        1e-4
    };
    assert_eq!(got.len(), want.data.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(&want.data).enumerate() {
        let g = g.to_f64().unwrap();
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

/// Loads the case's parameters through the checkpoint keys: every tensor of
/// the model must be in the fixture with its shape, and every fixture tensor
/// in the model.
pub fn load<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(model: &mut M, case: &RnnCase) {
    let state: StateMap<E> = case
        .params
        .iter()
        .map(|(k, a)| {
            let t = HostTensor {
                shape: a.shape.clone(),
                data: cast(a),
            };
            (k.clone(), t)
        })
        .collect();
    load_module_state(model, "", &state)
        .unwrap_or_else(|e| panic!("{}: the fixture does not fit the model: {e:?}", case.layer));
}

/// Every parameter's gradient against the fixture's, by key; the model's
/// keys must be exactly the fixture's.
pub fn assert_grads<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    what: &str,
    model: &M,
    grads: &Gradients<E, D>,
    case: &RnnCase,
) {
    let params = Params::of(model).unwrap();
    let names = &params.info().names;
    let want: Vec<&String> = case.grads.keys().collect();
    let mut got: Vec<&String> = names.iter().collect();
    got.sort();
    assert_eq!(got, want, "{what}: keys");
    for (name, leaf) in names.iter().zip(params.leaves()) {
        assert_flax(
            &format!("{what} grad {name} ({})", case.flax_paths[name]),
            &grads.get(leaf).as_vec(),
            &case.grads[name],
        );
    }
}

/// Runs `$case` through `Rnn<$cell<I, H>, REVERSE, KEEP_ORDER,
/// RETURN_CARRY>` in dtype `$e` on `$dev`, input shape `$x`, output `$y`.
macro_rules! rnn_case {
    ($dev:expr, $e:ty, $case:expr, $cell:ident<$i:literal, $h:literal>,
     $rev:literal, $keep:literal, $carry:literal, $x:ty, $y:ty) => {{
        use flaxen::runtime::layers::builder;
        let case: &$crate::rnn::RnnCase = $case;
        let what = format!("{} {}", case.layer, stringify!($e));
        assert_eq!(
            (
                case.cell.to_lowercase(),
                case.features,
                case.reverse,
                case.keep_order,
                case.return_carry
            ),
            (stringify!($cell).to_lowercase(), $h, $rev, $keep, $carry),
            "the case's line does not describe it"
        );
        let dev = $dev;
        let mut m =
            dev.build_module::<builder::Rnn<builder::$cell<$i, $h>, $rev, $keep, $carry>, $e>();
        $crate::rnn::load(&mut m, case);
        assert_eq!(
            m.num_trainable_params(),
            case.num_params,
            "{what}: parameter count"
        );
        let x: Tensor<$x, $e, _> = dev.tensor_from_vec($crate::rnn::cast(&case.x), <$x>::default());
        let r: Tensor<$y, $e, _> = dev.tensor_from_vec($crate::rnn::cast(&case.r), <$y>::default());
        let y: Tensor<$y, $e, _> = m.forward(x.clone());
        $crate::rnn::assert_flax(&format!("{what} y"), &y.as_vec(), &case.y);
        let y = m.forward(x.leaky_trace());
        $crate::rnn::assert_flax(&format!("{what} y (taped)"), &y.as_vec(), &case.y);
        let grads = (y * r).sum().backward();
        $crate::rnn::assert_flax(
            &format!("{what} grad x"),
            &grads.get(&x).as_vec(),
            &case.grad_x,
        );
        $crate::rnn::assert_grads(&what, &m, &grads, case);
    }};
}

/// Every case of the fixture, on `$dev` in dtype `$e`.
macro_rules! all_rnn_cases {
    ($dev:expr, $e:ty) => {{
        let f = $crate::rnn::fixture();
        let [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10] = &f.cases[..] else {
            panic!("a new case of the fixture needs a line here")
        };
        rnn_case!($dev, $e, c0, LstmCell<3, 5>, false, false, false, Rank3<2, 7, 3>, Rank3<2, 7, 5>);
        rnn_case!($dev, $e, c1, LstmCell<3, 5>, true, false, false, Rank3<2, 7, 3>, Rank3<2, 7, 5>);
        rnn_case!($dev, $e, c2, LstmCell<4, 3>, true, true, false, Rank3<3, 5, 4>, Rank3<3, 5, 3>);
        rnn_case!($dev, $e, c3, LstmCell<3, 5>, false, false, true, Rank3<2, 7, 3>, Rank2<2, 5>);
        rnn_case!($dev, $e, c4, LstmCell<5, 3>, true, false, true, Rank3<1, 3, 5>, Rank2<1, 3>);
        rnn_case!($dev, $e, c5, GruCell<4, 3>, false, false, false, Rank3<3, 5, 4>, Rank3<3, 5, 3>);
        rnn_case!($dev, $e, c6, GruCell<3, 5>, true, true, false, Rank3<2, 4, 3>, Rank3<2, 4, 5>);
        rnn_case!($dev, $e, c7, GruCell<4, 3>, false, false, true, Rank3<3, 5, 4>, Rank2<3, 3>);
        rnn_case!($dev, $e, c8, SimpleCell<5, 7>, false, false, false, Rank3<2, 3, 5>, Rank3<2, 3, 7>);
        rnn_case!($dev, $e, c9, SimpleCell<3, 4>, true, false, false, Rank3<2, 5, 3>, Rank3<2, 5, 4>);
        rnn_case!($dev, $e, c10, SimpleCell<5, 7>, true, true, true, Rank3<2, 3, 5>, Rank2<2, 7>);
    }};
}

pub(crate) use all_rnn_cases;
