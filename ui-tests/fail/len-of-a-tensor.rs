use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4>) {
        Dense(len(x))(x)
    }
}

fn main() {}
