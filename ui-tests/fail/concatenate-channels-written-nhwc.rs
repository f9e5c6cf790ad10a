use flaxen::prelude::*;

pub struct Skip;

#[compact]
impl Skip {
    fn forward(x: Input<8, 16, 16>) {
        let u = relu(Conv(8, (3, 3))(x));
        // Flax joins NHWC feature maps along axis -1, the channels.
        concatenate((u, x), axis = -1)
    }
}

fn main() {}
