use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<8>) {
        xavier_uniform()(x)
    }
}

fn main() {}
