use flaxen::prelude::*;

pub struct Seq;

#[compact]
impl Seq {
    fn forward(x: Input<28, 28>) {
        let h = RNN(return_carry = true)(x);
        Dense(10)(h)
    }
}

fn main() {}
