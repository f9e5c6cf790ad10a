use flaxen::prelude::*;

pub struct Classifier;

#[compact]
impl Classifier {
    fn forward(x: Input<16>) {
        let x = Embed(num_embeddings = 100, features = 8)(x);
        Dense(2)(flatten(x))
    }
}

fn main() {}
