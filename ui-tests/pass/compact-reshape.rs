use flaxen::prelude::*;

/// `reshape` with the per-example shape; `-1` is inferred.
pub struct Patches;

#[compact]
impl Patches {
    fn forward(x: Input<4, 8, 8>) {
        let x = reshape(x, (16, -1));
        let x = SelfAttention(num_heads = 2)(x);
        let x = reshape(x, (-1,));
        Dense(10)(x)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Patches, f32>();
    let x: Tensor<Rank4<2, 4, 8, 8>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x);
}
