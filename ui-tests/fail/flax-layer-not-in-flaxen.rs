use flaxen::prelude::*;

pub struct Classifier;

#[compact]
impl Classifier {
    fn forward(x: Input<16>) {
        let x = Embed(num_embeddings = 1000, features = 32)(x);
        Dense(2)(flatten(x))
    }
}

fn main() {}
