use flaxen::prelude::*;

pub struct Vae;

#[compact]
impl Vae {
    fn setup(features: Param<8>) {
        let decoder = Dense(features);
    }

    fn forward(x: Input<8>) {
        self.decoder(x)
    }
}

fn main() {}
