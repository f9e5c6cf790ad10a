use flaxen::prelude::*;

pub struct Classifier;

#[compact]
impl Classifier {
    fn forward(x: Input<16>) {
        let x = InstanceNorm()(x);
        Dense(2)(flatten(x))
    }
}

fn main() {}
