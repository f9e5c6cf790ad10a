use flaxen::prelude::*;

pub struct Decoder;

#[compact]
impl Decoder {
    fn forward(x: Input<6, 8>, ids: Tokens<6>) {
        x + Embed(num_embeddings = 10, features = 8)(ids)
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(ids: Tokens<6>) {
        let x = Embed(10, 8)(ids);
        let x = remat(Decoder())(x, ids);
        Dense(2)(x[0])
    }
}

fn main() {}
