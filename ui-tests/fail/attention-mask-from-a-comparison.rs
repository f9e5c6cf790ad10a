use flaxen::prelude::*;

pub struct Classifier;

#[compact]
impl Classifier {
    fn forward(tokens: Tokens<16>) {
        let mask = make_attention_mask(tokens > 0, tokens > 0);
        let x = Embed(100, 32)(tokens);
        let x = SelfAttention(num_heads = 4)(x, mask = mask);
        Dense(2)(x[0])
    }
}

fn main() {}
