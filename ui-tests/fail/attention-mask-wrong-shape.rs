use flaxen::prelude::*;

pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(x: Input<8, 16>, mask: Mask<8, 9>) {
        SelfAttention(num_heads = 2)(x, mask = mask)
    }
}

fn main() {}
