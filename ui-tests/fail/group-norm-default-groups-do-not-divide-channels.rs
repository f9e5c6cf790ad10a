use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 8, 8>) {
        let x = Conv(16, (3, 3))(x);
        let x = GroupNorm()(x);
        Dense(2)(flatten(x))
    }
}

fn main() {}
