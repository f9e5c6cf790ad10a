use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4, 8>) {
        let y = x[2..6];
        Dense(2)(flatten(y))
    }
}

fn main() {}
