use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<2, 1, 1>) {
        ConvTranspose(features = 4, kernel_size = (3, 3), padding = 0)(x)
    }
}

fn main() {}
