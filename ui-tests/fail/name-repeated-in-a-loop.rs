use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        let mut x = x;
        for i in 0..2 {
            x = Dense(8, name = "block")(x);
        }
        x
    }
}

fn main() {}
