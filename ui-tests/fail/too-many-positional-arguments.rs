use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        Dense(10, true, 3)(x)
    }
}

fn main() {}
