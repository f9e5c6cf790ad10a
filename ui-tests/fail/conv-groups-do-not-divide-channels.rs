use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4, 8, 8>) {
        Conv(features = 8, kernel_size = (3, 3), feature_group_count = 3)(x)
    }
}

fn main() {}
