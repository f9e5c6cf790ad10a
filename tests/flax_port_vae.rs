use flaxen::prelude::*;

pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(x: Input<784>, latents: Param<20>) {
        let x = Dense(500, name = "fc1")(x);
        let x = relu(x);
        let mean_x = Dense(latents, name = "fc2_mean")(x);
        let logvar_x = Dense(latents, name = "fc2_logvar")(x);
        (mean_x, logvar_x)
    }
}

pub struct Decoder;

#[compact]
impl Decoder {
    fn forward(z: Input<20>) {
        let z = Dense(500, name = "fc1")(z);
        let z = relu(z);
        Dense(784, name = "fc2")(z)
    }
}

pub struct Vae;

#[compact]
impl Vae {
    fn setup() {
        let encoder = Encoder(latents);
        let decoder = Decoder();
    }

    fn forward(x: Input<784>, latents: Param<20>) {
        let (mean, logvar) = self.encoder(x);
        let z = self.reparameterize(mean, logvar);
        let recon_x = self.decoder(z);
        (recon_x, mean, logvar)
    }

    fn reparameterize(mean: Input<20>, logvar: Input<20>) {
        let std = exp(0.5 * logvar);
        let eps = random.normal(logvar.shape);
        mean + eps * std
    }

    /// Images from latents.
    fn generate(z: Input<20>) {
        sigmoid(self.decoder(z))
    }
}

#[test]
fn vae() {
    let dev = Cpu::seed_from_u64(0);
    let m = dev.build_module::<Vae, f32>();
    let x: Tensor<Rank2<2, 784>, f32, Cpu> = dev.sample_normal();
    let (_r, _mean, _logvar) = m.forward(x.clone());
    let z: Tensor<Rank2<2, 20>, f32, Cpu> = dev.sample_normal();
    let g = m.generate(z);
    println!("{:?} {}", g.shape(), m.num_trainable_params());
    for k in flaxen::interop::flax::read_arrays(&flaxen::interop::flax::save(&m).unwrap())
        .unwrap()
        .keys()
    {
        println!("{k}");
    }
}
