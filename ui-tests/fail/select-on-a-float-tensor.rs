use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<5>, y: Input<5>) {
        select(x, x, y)
    }
}

fn main() {}
