use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 6, 6>) {
        Conv(features = 8, kernel_size = (3, 3), input_dilation = 2)(x)
    }
}

fn main() {}
