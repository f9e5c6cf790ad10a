use flaxen::prelude::*;

pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(x: Input<8, 16>, mask: Mask<8, 8>) {
        SelfAttention(num_heads = 2)(x, mask)
    }
}

fn main() {}
