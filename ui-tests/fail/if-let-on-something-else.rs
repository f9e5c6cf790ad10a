use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<8>, out_dim: Param<None>) {
        if let (a, b) = out_dim {
            Dense(a)(x)
        } else {
            x
        }
    }
}

fn main() {}
