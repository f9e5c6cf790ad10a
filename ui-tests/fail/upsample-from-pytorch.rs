use flaxen::prelude::*;

pub struct Up;

#[compact]
impl Up {
    fn forward(x: Input<8, 16, 16>) {
        Upsample(scale_factor = 2)(x)
    }
}

fn main() {}
