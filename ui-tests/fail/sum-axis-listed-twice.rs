use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 8, 8>) {
        let x = sum(x, axis = (-1, -1));
        Dense(2)(flatten(x))
    }
}

fn main() {}
