use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<8>) {
        Dense(10, kernel_init = zeros())(x)
    }
}

fn main() {}
