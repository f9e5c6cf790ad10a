use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8, 16>) {
        let mask = make_causal_mask(x);
        let x = x + remat(SelfAttention(num_heads = 2))(x, mask = mask);
        Dense(10)(x[-1])
    }
}

fn main() {}
