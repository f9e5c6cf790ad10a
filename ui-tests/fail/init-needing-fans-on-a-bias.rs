use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<8>) {
        Dense(10, bias_init = xavier_uniform())(x)
    }
}

fn main() {}
