use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<16>, act: Param<relu>) {
        act()(x)
    }
}

fn main() {}
