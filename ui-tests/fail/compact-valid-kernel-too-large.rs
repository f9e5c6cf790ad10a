use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 4, 4>) {
        Conv(features = 8, kernel_size = (5, 5), padding = VALID)(x)
    }
}

fn main() {}
