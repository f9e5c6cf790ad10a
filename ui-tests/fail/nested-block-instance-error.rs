use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<4, 8, 8>, kernel: Param<3>) {
        relu(Conv(4, kernel, padding = VALID)(x))
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4, 6, 6>) {
        let x = Block(kernel = 7)(x);
        Dense(10)(flatten(x))
    }
}

fn main() {}
