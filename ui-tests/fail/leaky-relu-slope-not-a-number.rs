use flaxen::prelude::*;

pub struct Net;

const SLOPE: f64 = 0.2;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        let x = leaky_relu(Dense(8)(x), negative_slope = SLOPE);
        Dense(2)(x)
    }
}

fn main() {}
