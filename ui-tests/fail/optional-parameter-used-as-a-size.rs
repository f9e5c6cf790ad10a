use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<8>, out_dim: Param<None>) {
        Dense(out_dim)(x)
    }
}

fn main() {}
