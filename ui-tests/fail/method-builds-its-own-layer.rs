use flaxen::prelude::*;

pub struct Vae;

#[compact]
impl Vae {
    fn setup() {
        let decoder = Dense(8);
    }

    fn forward(x: Input<8>) {
        self.decoder(x)
    }

    fn generate(z: Input<8>) {
        sigmoid(Dense(8)(z))
    }
}

fn main() {}
