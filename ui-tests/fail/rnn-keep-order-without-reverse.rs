use flaxen::prelude::*;

pub struct Seq;

#[compact]
impl Seq {
    fn forward(x: Input<28, 28>) {
        let h = RNN(GRUCell(32), keep_order = true)(x);
        Dense(10)(flatten(h))
    }
}

fn main() {}
