use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let x = relu(Dense(128)(x));
        return Dense(10)(x);
    }
}

fn main() {}
