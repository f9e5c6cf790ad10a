use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 28, 28>) {
        Conv(features = 8, kernel_size = (3, 3), strides = (1, 0))(x)
    }
}

fn main() {}
