use flaxen::prelude::*;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<28, 28, 1>) {
        let x = relu(Conv(32, (3, 3))(x));
        Dense(10)(flatten(x))
    }
}

fn main() {}
