use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<4, 8, 8>) {
        relu(Conv(4, 7, padding = VALID)(x))
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4, 6, 6>) {
        let a = Block()(x);
        let b = Block()(x);
        let c = Block()(x);
        Dense(10)(flatten(a + b + c))
    }
}

fn main() {}
