use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>, train: bool) {
        let x = Dropout(0.5)(relu(Dense(128)(x)));
        Dense(10)(x)
    }
}

fn main() {}
