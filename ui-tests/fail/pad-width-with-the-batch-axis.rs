use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<2, 5>) {
        pad(x, ((0, 0), (1, 1), (1, 1)))
    }
}

fn main() {}
