use flaxen::prelude::*;

pub struct Lm;

#[compact]
impl Lm {
    fn forward(tokens: Tokens<8>) {
        let x = Embed(50, 16)(tokens);
        (Dense(50)(x), tokens)
    }
}

fn main() {}
