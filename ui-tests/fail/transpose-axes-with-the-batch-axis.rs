use flaxen::prelude::*;

pub struct Seq;

#[compact]
impl Seq {
    fn forward(x: Input<8, 16>) {
        // Flax's `jnp.transpose(x, (0, 2, 1))` names the batch axis.
        let y = transpose(x, (0, 2, 1));
        Dense(3)(y)
    }
}

fn main() {}
