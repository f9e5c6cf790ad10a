use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<16>) {
        ConvTranspose(features = 8, kernel_size = (3, 3))(x)
    }
}

fn main() {}
