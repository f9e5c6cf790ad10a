use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(tokens: Tokens<8>) {
        let x = remat(Embed(100, 16))(tokens);
        Dense(10)(x[0])
    }
}

fn main() {}
