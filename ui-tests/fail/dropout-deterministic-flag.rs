use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let x = relu(Dense(128)(x));
        let x = Dropout(rate = 0.5, deterministic = true)(x);
        Dense(10)(x)
    }
}

fn main() {}
