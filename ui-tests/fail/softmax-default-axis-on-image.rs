use flaxen::prelude::*;

pub struct Seg;

#[compact]
impl Seg {
    fn forward(x: Input<3, 16, 16>) {
        // Per-pixel class probabilities: Flax's default axis -1 is NHWC's
        // channel axis.
        softmax(Conv(5, (1, 1))(x))
    }
}

fn main() {}
