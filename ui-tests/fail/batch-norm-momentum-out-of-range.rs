use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        let x = BatchNorm(momentum = 1.5)(x);
        Dense(2)(x)
    }
}

fn main() {}
