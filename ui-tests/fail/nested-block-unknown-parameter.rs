use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<8>, features: Param<8>) {
        relu(Dense(features)(x))
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<16>) {
        let x = Block(featurs = 32)(x);
        Dense(10)(x)
    }
}

fn main() {}
