use flaxen::prelude::*;

pub struct Deep;

#[compact]
impl Deep {
    fn forward(x: Input<32>, depth: Param<3>) {
        let mut x = x;
        for _ in range(depth) {
            x = relu(Dense(32)(x));
        }
        x
    }
}

fn main() {}
