use flaxen::prelude::*;

pub struct Vit;

#[compact]
impl Vit {
    fn forward(x: Input<4, 16>) {
        let pos = param("pos", "zeros", (1, 4, 16));
        x + pos
    }
}

fn main() {}
