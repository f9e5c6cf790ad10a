use flaxen::prelude::*;

pub struct Cnn;

// A NumPy habit: a transpose as a method call.
#[compact]
impl Cnn {
    fn forward(x: Input<3, 32, 32>) {
        let x = x.transpose((0, 2, 1));
        let x = relu(Conv(16, (3, 3))(x));
        Dense(10)(flatten(x))
    }
}

fn main() {}
