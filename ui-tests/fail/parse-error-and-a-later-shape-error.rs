use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 28, 28>) {
        let h = x.reshape((28, 28));
        let y = Conv(8, (3, 3))(x);
        let z = Dense(10)(y);
        Dense(10)(flatten(z)) + h
    }
}

fn main() {}
