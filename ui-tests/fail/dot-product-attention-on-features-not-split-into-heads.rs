use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4, 6>) {
        dot_product_attention(x, x, x)
    }
}

fn main() {}
