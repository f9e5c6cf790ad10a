use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 28, 28>) {
        let a = Conv(features = 0, kernel_size = (3, 3))(x);
        let b = Dense(features = 10)(x);
        let c = max_pool(x, window_shape = (2, 2), stride = (2, 2));
        Dense(10)(flatten(c))
    }
}

fn main() {}
