use flaxen::prelude::*;

pub struct Net;

// A CamelCase name that is no flaxen word, nor close to one, is taken to be
// another `#[compact]` model of the crate; with none, rustc says so.
#[compact]
impl Net {
    fn forward(x: Input<16>) {
        let x = ResidualBlok(features = 16)(x);
        Dense(10)(x)
    }
}

fn main() {}
