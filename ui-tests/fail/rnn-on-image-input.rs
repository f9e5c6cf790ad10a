use flaxen::prelude::*;

pub struct Seq;

#[compact]
impl Seq {
    fn forward(x: Input<1, 28, 28>) {
        let h = RNN(LSTMCell(features = 64), return_carry = true)(x);
        Dense(10)(h)
    }
}

fn main() {}
