use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<32, 8>) {
        x + sinusoidal_positions(x, max_len = 16)
    }
}

fn main() {}
