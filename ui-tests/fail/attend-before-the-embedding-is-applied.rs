use flaxen::prelude::*;

pub struct Lm;

#[compact]
impl Lm {
    fn forward(tokens: Tokens<6>) {
        let embed = Embed(20, 8);
        let other = Embed(20, 8)(tokens);
        embed.attend(other)
    }
}

fn main() {}
