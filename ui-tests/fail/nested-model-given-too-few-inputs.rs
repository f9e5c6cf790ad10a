use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<8, 16>, mask: Mask<8, 8>) {
        x + SelfAttention(num_heads = 2)(x, mask = mask)
    }
}

pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(x: Input<8, 16>) {
        Block()(x)
    }
}

fn main() {}
