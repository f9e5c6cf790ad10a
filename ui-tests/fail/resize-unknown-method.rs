use flaxen::prelude::*;

pub struct Up;

#[compact]
impl Up {
    fn forward(x: Input<8, 16, 16>) {
        resize(x, (8, 32, 32), method = "bilnear")
    }
}

fn main() {}
