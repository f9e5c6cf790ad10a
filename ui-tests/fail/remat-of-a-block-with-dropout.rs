use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<16>) {
        x + Dropout(0.1)(Dense(16)(relu(Dense(64)(x))))
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<16>) {
        let x = remat(Block())(x);
        Dense(10)(x)
    }
}

fn main() {}
