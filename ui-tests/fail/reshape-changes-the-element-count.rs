use flaxen::prelude::*;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 28, 28>) {
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        Dense(10)(reshape(x, (14, 12)))
    }
}

fn main() {}
