use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<8>, proj: Param<None>) {
        x
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        let dense = Dense(8);
        Block(proj = dense)(x)
    }
}

fn main() {}
