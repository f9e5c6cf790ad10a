use flaxen::prelude::*;

pub struct Tagger;

#[compact]
impl Tagger {
    fn forward(tokens: Tokens<7>, lengths: Lengths) {
        let x = Embed(30, 8)(tokens);
        RNN(LSTMCell(6))(x, seq_lengths = tokens)
    }
}

fn main() {}
