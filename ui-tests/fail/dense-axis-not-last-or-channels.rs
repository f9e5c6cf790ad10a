use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4, 6, 6>) {
        Dense(8, axis = -2)(x)
    }
}

fn main() {}
