use flaxen::prelude::*;

pub struct Noisy;

#[compact]
impl Noisy {
    fn forward(x: Input<8>) {
        x + random.uniform(x, minval = -1.0, maxval = 1.0)
    }
}

fn main() {}
