use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 28, 28>) {
        Conv(features = 32)(x)
    }
}

fn main() {}
