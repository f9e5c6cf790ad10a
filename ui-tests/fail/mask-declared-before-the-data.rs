use flaxen::prelude::*;

pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(mask: Mask<8, 8>, x: Input<8, 16>) {
        SelfAttention(num_heads = 2)(x, mask = mask)
    }
}

fn main() {}
