use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 0, 28>) {
        relu(x)
    }
}

fn main() {}
