use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<8>) {
        Dense(10, kernel_init = 0.5)(x)
    }
}

fn main() {}
