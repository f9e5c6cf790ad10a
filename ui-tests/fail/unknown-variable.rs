use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let hidden = relu(Dense(128)(x));
        Dense(10)(hiden)
    }
}

fn main() {}
