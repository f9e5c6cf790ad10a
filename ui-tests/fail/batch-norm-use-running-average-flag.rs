use flaxen::prelude::*;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 28, 28>) {
        let x = Conv(16, (3, 3))(x);
        let x = relu(BatchNorm(use_running_average = false)(x));
        Dense(10)(flatten(x))
    }
}

fn main() {}
