use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let y = Dense(10)(x);
    }
}

fn main() {}
