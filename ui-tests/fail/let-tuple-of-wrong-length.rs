use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<4, 8, 8>) {
        let (c, h) = x.shape;
        Dense(c * h)(flatten(x))
    }
}

fn main() {}
