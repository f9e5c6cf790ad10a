use flaxen::prelude::*;

pub struct Proj;

#[compact]
impl Proj {
    fn forward(x: Input<3, 8, 8>) {
        // Flax's `x.shape[1]` is an NHWC height; flaxen's shapes have no
        // batch axis.
        let y = Conv(16, (3, 3))(x);
        Conv(x.shape[1], (1, 1))(y)
    }
}

fn main() {}
