use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        Dense(features = 0)(x)
    }
}

fn main() {}
