use flaxen::prelude::*;

/// A row-LSTM digit classifier as a Flax user writes it: each image row is
/// a time step; a bidirectional pair reads them both ways.
pub struct RowLstm;

#[compact]
impl RowLstm {
    fn forward(x: Input<1, 28, 28>) {
        let x = reshape(x, (28, 28));
        let fwd = RNN(LSTMCell(features = 32))(x);
        let bwd = RNN(LSTMCell(features = 32), reverse = true, keep_order = true)(x);
        let x = concatenate((fwd, bwd), axis = -1);
        let h = RNN(GRUCell(64), return_carry = true)(x);
        Dense(10)(h)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<RowLstm, f32>();
    // Flax's count: LSTM 4 (I H + H H + H), GRU 3 I H + 3 H H + 4 H.
    let lstm = 4 * (28 * 32 + 32 * 32 + 32);
    let gru = 3 * 64 * 64 + 3 * 64 * 64 + 4 * 64;
    assert_eq!(m.num_trainable_params(), 2 * lstm + gru + 64 * 10 + 10);
    let x: Tensor<Rank4<2, 1, 28, 28>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x);
    let _ = (&m.lstm_cell_0.cell.ii, &m.lstm_cell_1.cell.hi, &m.gru_cell_0.cell.hn);
}
