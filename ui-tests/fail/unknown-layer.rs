use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let x = relu(Desne(features = 128)(x));
        Dense(10)(x)
    }
}

fn main() {}
