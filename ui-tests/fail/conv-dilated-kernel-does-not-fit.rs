use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 6, 6>) {
        Conv(features = 8, kernel_size = (3, 3), padding = VALID, kernel_dilation = 3)(x)
    }
}

fn main() {}
