use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        clip(x, 1.0, -1.0)
    }
}

fn main() {}
