use flaxen::prelude::*;

pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(x: Input<16, 12>) {
        let x = x + SelfAttention(num_heads = 5)(LayerNorm()(x));
        Dense(2)(flatten(x))
    }
}

fn main() {}
