use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<2, 5>, m: Mask<2, 5>) {
        where(m, x, 0.0)
    }
}

fn main() {}
