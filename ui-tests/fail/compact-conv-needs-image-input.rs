use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<784>) {
        Conv(features = 32, kernel_size = (3, 3))(x)
    }
}

fn main() {}
