//! `tests/fixtures/flax_rnn.json` (Flax linen `nn.RNN` over `LSTMCell`,
//! `GRUCell` and `SimpleCell` with `reverse`, `keep_order` and
//! `return_carry`, float64, made by `tests/python/make_flax_rnn.py`) and the
//! check that runs flaxen's [`Rnn`](flaxen::runtime::layers::Rnn) against
//! every case on a device: parameters loaded by checkpoint key, output with
//! and without a tape, the input gradient and every parameter's gradient by
//! key for `loss = sum(y * r)`, and Flax's parameter count.
//!
//! Tolerance (`norm_act.rs`'s): `|flaxen - flax| <= tol * max(|flax|, 1)`
//! per element, `tol` 1e-9 in f64 and 1e-4 in f32. Loading and the
//! gradient check are `compact_v2.rs`'s; include both first.
//!
//! ```ignore
//! #[path = "common/rnn.rs"]
//! #[macro_use]
//! mod rnn;
//! rnn::all_rnn_cases!(&Cpu::default(), f64);
//! ```
#![allow(dead_code)]

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::norm_act::Arr;

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
        $crate::compact_v2::load_tensors(&mut m, &case.layer, case.params.iter());
        assert_eq!(
            m.num_trainable_params(),
            case.num_params,
            "{what}: parameter count"
        );
        let x: Tensor<$x, $e, _> =
            dev.tensor_from_vec($crate::norm_act::cast(&case.x), <$x>::default());
        let r: Tensor<$y, $e, _> =
            dev.tensor_from_vec($crate::norm_act::cast(&case.r), <$y>::default());
        let y: Tensor<$y, $e, _> = m.forward(x.clone());
        $crate::norm_act::assert_flax(&format!("{what} y"), &y.as_vec(), &case.y);
        let y = m.forward(x.leaky_trace());
        $crate::norm_act::assert_flax(&format!("{what} y (taped)"), &y.as_vec(), &case.y);
        let grads = (y * r).sum().backward();
        $crate::norm_act::assert_flax(
            &format!("{what} grad x"),
            &grads.get(&x).as_vec(),
            &case.grad_x,
        );
        $crate::compact_v2::assert_param_grads(&what, &m, &grads, &case.grads);
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
