use flaxen::prelude::*;

pub struct Vit;

#[compact]
impl Vit {
    fn forward(x: Input<4, 16>) {
        let cls = self.param("cls", zeros, (1, 1, 16));
        concatenate((cls, x), axis = -2)
    }
}

fn main() {}
