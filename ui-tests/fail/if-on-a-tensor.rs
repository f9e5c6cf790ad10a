use flaxen::prelude::*;

pub struct Gate;

#[compact]
impl Gate {
    fn forward(x: Input<32>) {
        let y = Dense(32)(x);
        if y > 0.0 {
            relu(y)
        } else {
            y
        }
    }
}

fn main() {}
