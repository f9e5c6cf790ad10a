use flaxen::prelude::*;

pub struct Up;

#[compact]
impl Up {
    fn forward(x: Input<8, 16, 16>) {
        // PyTorch's `order`-style number instead of a method name.
        resize(x, (8, 32, 32), method = 1)
    }
}

fn main() {}
