use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<8>) {
        Dense(10, kernel_init = variance_scaling(1.0, "fan_mean", "uniform"))(x)
    }
}

fn main() {}
