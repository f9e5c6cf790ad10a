use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<64>) {
        relu(Dense(64)(x))
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<784>) {
        let x = Dense(32)(x);
        let x = x + Block()(x);
        Dense(10)(x)
    }
}

fn main() {}
