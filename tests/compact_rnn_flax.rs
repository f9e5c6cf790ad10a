//! `RNN(LSTMCell(..))`, `GRUCell` and `SimpleCell` written in `#[compact]`
//! against Flax's `nn.RNN` (`tests/fixtures/flax_rnn.json`, made by
//! `tests/python/make_flax_rnn.py`): the fixture's parameters loaded under
//! the field Flax names (`lstm_cell_0`, the cell's name: `RNN` adds no
//! level), then the output, the input gradient, every parameter gradient and
//! the parameter count, f64 within `1e-9` and f32 within `1e-4` (relative to
//! `max(|flax|, 1)`).

#[path = "common/fixture.rs"]
mod fixture;

#[allow(unused_macros, unused_imports)]
#[path = "common/norm_act.rs"]
mod norm_act;

#[allow(unused_macros, unused_imports)]
#[path = "common/compact_v2.rs"]
mod compact_v2;

use std::collections::BTreeMap;

use compact_v2::{assert_param_grads, load_tensors};
use flaxen::prelude::*;
use norm_act::{assert_flax, tensor, Arr};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    layer: String,
    x: Arr,
    r: Arr,
    params: BTreeMap<String, Arr>,
    num_params: usize,
    y: Arr,
    grad_x: Arr,
    grads: BTreeMap<String, Arr>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

/// The fixture's case for `layer`, its keys under `field`.
fn case(layer: &str, field: &str) -> Case {
    let f: Fixture =
        serde_json::from_str(include_str!("fixtures/flax_rnn.json")).expect("fixture parses");
    let mut c = f
        .cases
        .into_iter()
        .find(|c| c.layer == layer)
        .unwrap_or_else(|| panic!("no case {layer}"));
    let prefix = |m: BTreeMap<String, Arr>| {
        m.into_iter()
            .map(|(k, v)| (format!("{field}.{k}"), v))
            .collect()
    };
    c.params = prefix(c.params);
    c.grads = prefix(c.grads);
    c
}

pub struct Lstm;

#[compact]
impl Lstm {
    fn forward(x: Input<7, 3>) {
        RNN(LSTMCell(features = 5))(x)
    }
}

pub struct LstmLast;

#[compact]
impl LstmLast {
    fn forward(x: Input<3, 5>) {
        RNN(LSTMCell(3), reverse = true, return_carry = true)(x)
    }
}

pub struct BiGru;

#[compact]
impl BiGru {
    fn forward(x: Input<4, 3>) {
        RNN(GRUCell(features = 5), reverse = true, keep_order = true)(x)
    }
}

pub struct Simple;

#[compact]
impl Simple {
    fn forward(x: Input<3, 5>) {
        RNN(SimpleCell(features = 7))(x)
    }
}

macro_rules! rnn_parity {
    ($name:ident, $model:ty, $e:ty, $layer:expr, $field:expr, $x:ty, $y:ty) => {
        #[test]
        fn $name() {
            let dev: Cpu = Default::default();
            let c = case($layer, $field);
            let mut m = dev.build_module::<$model, $e>();
            load_tensors(&mut m, &c.layer, c.params.iter());
            assert_eq!(m.num_trainable_params(), c.num_params, "{}", c.layer);
            let x: Tensor<$x, $e, _> = tensor(&dev, &c.x);
            let r: Tensor<$y, $e, _> = tensor(&dev, &c.r);
            let y = m.forward(x.leaky_trace());
            assert_flax(&format!("{} y", c.layer), &y.as_vec(), &c.y);
            let g = (y * r).sum().backward();
            assert_flax(
                &format!("{} grad x", c.layer),
                &g.get(&x).as_vec(),
                &c.grad_x,
            );
            assert_param_grads(&c.layer, &m, &g, &c.grads);
        }
    };
}

const LSTM: &str = "RNN(LSTMCell(features=5), reverse=False, keep_order=False, return_carry=False)";
const LSTM_LAST: &str =
    "RNN(LSTMCell(features=3), reverse=True, keep_order=False, return_carry=True)";
const BI_GRU: &str = "RNN(GRUCell(features=5), reverse=True, keep_order=True, return_carry=False)";
const SIMPLE: &str =
    "RNN(SimpleCell(features=7), reverse=False, keep_order=False, return_carry=False)";

rnn_parity!(lstm_matches_flax_f64, Lstm, f64, LSTM, "lstm_cell_0", Rank3<2, 7, 3>, Rank3<2, 7, 5>);
rnn_parity!(lstm_matches_flax_f32, Lstm, f32, LSTM, "lstm_cell_0", Rank3<2, 7, 3>, Rank3<2, 7, 5>);
rnn_parity!(lstm_carry_matches_flax_f64, LstmLast, f64, LSTM_LAST, "lstm_cell_0", Rank3<1, 3, 5>, Rank2<1, 3>);
rnn_parity!(gru_keep_order_matches_flax_f64, BiGru, f64, BI_GRU, "gru_cell_0", Rank3<2, 4, 3>, Rank3<2, 4, 5>);
rnn_parity!(simple_cell_matches_flax_f64, Simple, f64, SIMPLE, "simple_cell_0", Rank3<2, 3, 5>, Rank3<2, 3, 7>);
