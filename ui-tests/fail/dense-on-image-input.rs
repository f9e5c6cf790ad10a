use flaxen::prelude::*;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 28, 28>) {
        let x = Conv(features = 64, kernel_size = (3, 3))(x);
        let x = avg_pool(x, window_shape = (4, 4), strides = (4, 4));
        let x = Dense(features = 10)(x);
        x
    }
}

fn main() {}
