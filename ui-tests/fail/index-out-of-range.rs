use flaxen::prelude::*;

pub struct Head;

#[compact]
impl Head {
    fn forward(x: Input<16, 32>) {
        Dense(2)(x[16])
    }
}

fn main() {}
