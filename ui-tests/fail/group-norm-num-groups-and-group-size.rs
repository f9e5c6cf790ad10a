use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<16, 8, 8>) {
        let x = GroupNorm(num_groups = 4, group_size = 4)(x);
        Dense(2)(flatten(x))
    }
}

fn main() {}
