use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(&self, x: Input<784>, hidden: Param<128>) {
        let x = relu(Dense(self.hidden)(x));
        Dense(self.num_classes)(x)
    }
}

fn main() {}
