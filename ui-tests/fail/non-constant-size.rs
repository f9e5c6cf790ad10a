use flaxen::prelude::*;

const HIDDEN: usize = 128;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        Dense(features = HIDDEN)(x)
    }
}

fn main() {}
