use flaxen::prelude::*;

pub struct Seq;

#[compact]
impl Seq {
    fn forward(x: Input<5, 8>) {
        RNN(LSTMCell(16, name = "cell"))(x)
    }
}

fn main() {}
