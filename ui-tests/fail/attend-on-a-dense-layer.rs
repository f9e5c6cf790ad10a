use flaxen::prelude::*;

pub struct Lm;

#[compact]
impl Lm {
    fn forward(tokens: Tokens<6>) {
        let embed = Embed(20, 8);
        let dense = Dense(8);
        let x = dense(embed(tokens));
        dense.attend(x)
    }
}

fn main() {}
