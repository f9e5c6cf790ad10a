use flaxen::prelude::*;

pub struct Vit;

#[compact]
impl Vit {
    fn forward(x: Input<4, 16>) {
        let cls = param("cls", zeros);
        concatenate((cls, x), axis = -2)
    }
}

fn main() {}
