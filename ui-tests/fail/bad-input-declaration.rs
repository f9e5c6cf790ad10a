use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Tensor<Rank1<784>, f32, Cpu>) {
        Dense(10)(x)
    }
}

fn main() {}
