use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<4, 8, 8>, conv: Param<{ partial(Conv, use_bias = false) }>) {
        conv(x)
    }
}

fn main() {}
