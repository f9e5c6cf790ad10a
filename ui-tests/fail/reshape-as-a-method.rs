use flaxen::prelude::*;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 28, 28>) {
        let x = avg_pool(relu(Conv(16, (3, 3))(x)), (2, 2), strides = (2, 2));
        let x = x.reshape((16 * 14 * 14,));
        Dense(10)(x)
    }
}

fn main() {}
