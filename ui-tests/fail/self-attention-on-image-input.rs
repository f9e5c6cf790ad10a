use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 8, 8>) {
        let x = SelfAttention(4)(x);
        Dense(2)(flatten(x))
    }
}

fn main() {}
