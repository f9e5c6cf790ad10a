use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4>, mults: Param<{ (1, 2) }>) {
        let e = enumerate(mults);
        x
    }
}

fn main() {}
