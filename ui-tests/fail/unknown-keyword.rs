use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        Dense(featurs = 10)(x)
    }
}

fn main() {}
