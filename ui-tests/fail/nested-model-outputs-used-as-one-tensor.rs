use flaxen::prelude::*;

pub struct Heads;

#[compact]
impl Heads {
    fn forward(x: Input<16>) {
        (Dense(4)(x), Dense(1)(x))
    }
}

pub struct Agent;

#[compact]
impl Agent {
    fn forward(x: Input<16>) {
        let h = relu(Dense(16)(x));
        let y = Heads()(h);
        Dense(2)(y)
    }
}

fn main() {}
