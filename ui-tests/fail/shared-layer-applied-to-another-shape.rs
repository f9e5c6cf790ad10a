use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        let dense = Dense(8);
        let y = dense(x);
        dense(concatenate((y, x), axis = -1))
    }
}

fn main() {}
