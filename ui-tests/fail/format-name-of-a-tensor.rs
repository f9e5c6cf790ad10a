use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        Dense(8, name = format!("block_{x}"))(x)
    }
}

fn main() {}
