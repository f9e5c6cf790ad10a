use flaxen::prelude::*;

pub struct Up;

#[compact]
impl Up {
    fn forward(x: Input<64>) {
        resize(x, (128,), method = "linear")
    }
}

fn main() {}
