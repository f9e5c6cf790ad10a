use flaxen::prelude::*;

pub struct Classifier;

#[compact]
impl Classifier {
    fn forward(tokens: Tokens<4, 16>) {
        let x = Embed(100, 32)(tokens);
        Dense(2)(flatten(x))
    }
}

fn main() {}
