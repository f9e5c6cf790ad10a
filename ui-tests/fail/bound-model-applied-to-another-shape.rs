use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<8>) {
        relu(Dense(4)(x))
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        let block = Block();
        let y = block(x);
        block(y)
    }
}

fn main() {}
