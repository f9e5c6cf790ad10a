use flaxen::prelude::*;

pub struct Deep;

#[compact]
impl Deep {
    fn forward(x: Input<32>, depth: Param<3.0>) {
        let mut x = x;
        for _ in 0..depth {
            x = relu(Dense(32)(x));
        }
        x
    }
}

fn main() {}
