use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        Sequential([Dense(128), relu, Dense(10)])(x)
    }
}

fn main() {}
