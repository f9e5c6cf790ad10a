use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let x = relu(Dense(128, name = "head")(x));
        Dense(10, name = "head")(x)
    }
}

fn main() {}
