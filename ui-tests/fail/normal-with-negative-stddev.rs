use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<8>) {
        Dense(10, kernel_init = normal(stddev = -0.1))(x)
    }
}

fn main() {}
