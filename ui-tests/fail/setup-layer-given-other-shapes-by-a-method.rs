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

    fn generate(z: Input<4>) {
        sigmoid(self.decoder(z))
    }
}

fn main() {}
