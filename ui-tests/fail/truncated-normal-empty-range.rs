use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<8>) {
        Dense(10, kernel_init = truncated_normal(lower = 1.0, upper = -1.0))(x)
    }
}

fn main() {}
