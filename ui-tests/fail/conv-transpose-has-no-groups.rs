use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<2, 4, 4>) {
        ConvTranspose(features = 4, kernel_size = (3, 3), feature_group_count = 2)(x)
    }
}

fn main() {}
