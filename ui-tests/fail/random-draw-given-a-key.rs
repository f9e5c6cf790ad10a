use flaxen::prelude::*;

pub struct Vae;

#[compact]
impl Vae {
    fn forward(x: Input<8>) {
        let mean = Dense(4)(x);
        let logvar = Dense(4)(x);
        let eps = random.normal(z_rng, logvar.shape);
        mean + eps * exp(0.5 * logvar)
    }
}

fn main() {}
