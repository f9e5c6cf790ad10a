use flaxen::prelude::*;

pub struct Tiny;

#[compact]
impl Tiny {
    /// Other items of the impl block stay on `Tiny`.
    pub const CLASSES: usize = 3;

    fn forward(x: Input<4, 6>) {
        let x = LayerNorm()(x);
        let x = Dense(5)(x);
        let x = flatten(x) * 0.5 + 1.0;
        Dense(3)(x)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Tiny, f32>();
    let x: Tensor<Rank3<2, 4, 6>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, { Tiny::CLASSES }>, f32, _> = m.forward(x);
}
