use flaxen::prelude::*;

pub struct Deep;

#[compact]
impl Deep {
    fn forward(x: Input<32>) {
        let y = Dense(32)(x);
        for _ in 0..3 {
            y = relu(Dense(32)(y));
        }
        y
    }
}

fn main() {}
