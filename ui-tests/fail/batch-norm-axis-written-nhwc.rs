use flaxen::prelude::*;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 28, 28>) {
        let x = relu(BatchNorm(axis = -1)(Conv(16, (3, 3))(x)));
        Dense(10)(flatten(x))
    }
}

fn main() {}
