use flaxen::prelude::*;

pub struct Tagger;

#[compact]
impl Tagger {
    fn forward(x: Input<7, 8>, carry: Input<6>) {
        RNN(LSTMCell(6))(x, initial_carry = carry)
    }
}

fn main() {}
