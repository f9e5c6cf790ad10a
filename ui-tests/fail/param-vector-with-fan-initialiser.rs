use flaxen::prelude::*;

pub struct Vit;

#[compact]
impl Vit {
    fn forward(x: Input<4, 16>) {
        let b = param("b", lecun_normal(), (16,));
        x + b
    }
}

fn main() {}
