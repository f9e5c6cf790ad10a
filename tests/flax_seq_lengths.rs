//! `RNN(..)(x, seq_lengths = lengths)` against Flax's `nn.RNN` on padded
//! rows of lengths 7, 3, 1 and 5 (`tests/python/make_flax_seq_lengths.py`,
//! `fixtures/flax_seq_lengths.{msgpack,json}`): a classifier over the
//! final states of a forward and a reversed LSTM (each taken at its row's
//! last valid step), and a reversed, order-kept GRU tagger whose outputs
//! are compared at every position, the padded ones included (Flax runs
//! the cells over the padding, and reverses the padding block within
//! itself). Checked: parameter count and paths, the checkpoint as
//! `to_bytes` wrote it, outputs within 1e-5 (f32) and 1e-9 (f64),
//! gradients within 1e-4 (f32) and 1e-9 (f64), and that the lengths
//! matter (full lengths give Flax's logits without `seq_lengths`).

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/flax_files.rs"]
mod flax_files;

use fixture::{assert_rel, Arr};
use flax_files::{assert_grads, f32s, fixture, flax_grads, load_as_flax_wrote_it};
use flaxen::interop::flax;
use flaxen::prelude::*;

/// The generator's `Classifier`.
pub struct Classifier;

#[compact]
impl Classifier {
    fn forward(tokens: Tokens<7>, lengths: Lengths) {
        let x = Embed(30, 8)(tokens);
        let h_f =
            RNN(LSTMCell(6), return_carry = true, name = "forward_rnn")(x, seq_lengths = lengths);
        let h_b = RNN(
            LSTMCell(6),
            return_carry = true,
            reverse = true,
            name = "backward_rnn",
        )(x, seq_lengths = lengths);
        let ys = RNN(
            GRUCell(5),
            reverse = true,
            keep_order = true,
            name = "tagger",
        )(x, seq_lengths = lengths);
        let logits = Dense(3)(concatenate((h_f, h_b), axis = -1));
        (logits, ys)
    }
}

#[derive(serde::Deserialize)]
struct Extra {
    tokens: Arr,
    lengths: Arr,
    logits: Arr,
    ys: Arr,
    w_logits: Arr,
    w_ys: Arr,
    logits_f64: Arr,
    ys_f64: Arr,
    no_lengths_logits_f64: Arr,
}

const BYTES: &[u8] = include_bytes!("fixtures/flax_seq_lengths.msgpack");
const JSON: &str = include_str!("fixtures/flax_seq_lengths.json");

fn ids(a: &Arr) -> Vec<usize> {
    a.data.iter().map(|v| *v as usize).collect()
}

#[test]
fn padded_rows_match_flax() {
    let f = fixture(JSON);
    let e: Extra = serde_json::from_str(JSON).unwrap();
    let dev = Cpu::default();
    let mut m = dev.build_module::<Classifier, f32>();
    load_as_flax_wrote_it(&mut m, BYTES, &f);
    let t: Tensor<Rank2<4, 7>, usize, Cpu> = dev.tensor(ids(&e.tokens));
    let l: Tensor<Rank2<4, 1>, usize, Cpu> = dev.tensor(ids(&e.lengths));
    let (logits, ys) = m.forward((t.clone(), l.clone()));
    assert_rel("logits", &logits.as_vec(), &e.logits.data, 1e-5, 1.0);
    assert_rel("ys", &ys.as_vec(), &e.ys.data, 1e-5, 1.0);
    let wl: Tensor<Rank2<4, 3>, f32, Cpu> = dev.tensor(f32s(&e.w_logits));
    let wy: Tensor<Rank3<4, 7, 5>, f32, Cpu> = dev.tensor(f32s(&e.w_ys));
    let (logits, ys) = m.forward((t.traced(m.alloc_grads()), l));
    let grads = ((logits * wl).sum() + (ys * wy).sum()).backward();
    assert_grads(&flax_grads(&m, &grads), &f.grads_f64, 1e-4);
}

#[test]
fn padded_rows_in_f64_match_flax_in_f64() {
    let f = fixture(JSON);
    let e: Extra = serde_json::from_str(JSON).unwrap();
    let dev = Cpu::default();
    let mut m = dev.build_module::<Classifier, f64>();
    flax::load(&mut m, BYTES).unwrap();
    let t: Tensor<Rank2<4, 7>, usize, Cpu> = dev.tensor(ids(&e.tokens));
    let l: Tensor<Rank2<4, 1>, usize, Cpu> = dev.tensor(ids(&e.lengths));
    let (logits, ys) = m.forward((t.clone(), l.clone()));
    assert_rel("logits", &logits.as_vec(), &e.logits_f64.data, 1e-9, 1.0);
    assert_rel("ys", &ys.as_vec(), &e.ys_f64.data, 1e-9, 1.0);
    let wl: Tensor<Rank2<4, 3>, f64, Cpu> = dev.tensor(e.w_logits.data.clone());
    let wy: Tensor<Rank3<4, 7, 5>, f64, Cpu> = dev.tensor(e.w_ys.data.clone());
    let (logits, ys) = m.forward((t.clone().traced(m.alloc_grads()), l));
    let grads = ((logits * wl).sum() + (ys * wy).sum()).backward();
    assert_grads(&flax_grads(&m, &grads), &f.grads_f64, 1e-9);

    // Full lengths are no lengths: every row runs to 7, and the logits
    // are Flax's without `seq_lengths`, which differ from the padded ones
    // in the three short rows.
    let full: Tensor<Rank2<4, 1>, usize, Cpu> = dev.tensor([[7usize]; 4]);
    let (logits, _) = m.forward((t, full));
    assert_rel(
        "logits without lengths",
        &logits.as_vec(),
        &e.no_lengths_logits_f64.data,
        1e-9,
        1.0,
    );
    let differ = logits
        .as_vec()
        .chunks(3)
        .zip(e.logits_f64.data.chunks(3))
        .filter(|(a, b)| a.iter().zip(b.iter()).any(|(a, b)| (a - b).abs() > 1e-3))
        .count();
    assert_eq!(differ, 3);
}
