use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let x = nn.Dense(128)(x);
        Dense(10)(relu(x))
    }
}

fn main() {}
