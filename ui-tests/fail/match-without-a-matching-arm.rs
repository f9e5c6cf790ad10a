use flaxen::prelude::*;

pub struct Head;

#[compact]
impl Head {
    fn forward(x: Input<32>, kind: Param<3>) {
        match kind {
            1 => Dense(10)(x),
            2 => Dense(10)(relu(Dense(32)(x))),
        }
    }
}

fn main() {}
