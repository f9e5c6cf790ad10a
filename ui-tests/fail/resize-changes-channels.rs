use flaxen::prelude::*;

pub struct Up;

#[compact]
impl Up {
    fn forward(x: Input<8, 16, 16>) {
        resize(x, (16, 32, 32), method = "bilinear")
    }
}

fn main() {}
