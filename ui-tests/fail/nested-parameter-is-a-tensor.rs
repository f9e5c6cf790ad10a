use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<16>, features: Param<16>) {
        relu(Dense(features)(x))
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<16>) {
        let h = Dense(16)(x);
        Block(features = h)(x)
    }
}

fn main() {}
