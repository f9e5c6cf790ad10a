use flaxen::prelude::*;

pub struct Seq;

#[compact]
impl Seq {
    fn forward(x: Input<28, 28>) {
        let h = LSTMCell(features = 64)(x);
        Dense(10)(flatten(h))
    }
}

fn main() {}
