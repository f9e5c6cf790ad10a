use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<2, 5>) {
        slice(x, 3, 7, axis = -1)
    }
}

fn main() {}
