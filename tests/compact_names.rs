//! Names computed at expansion (`name = format!("encoderblock_{i}")`, Flax's
//! `name=f'encoderblock_{lyr}'`) and capitalised names (`"Transformer"`):
//! the field is the name snake-cased, the Flax path the name as written.

use flaxen::interop::flax::FlaxLeaves;
use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<8>, width: Param<16>) {
        x + Dense(8)(relu(Dense(width)(x)))
    }
}

pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(x: Input<8>, layers: Param<3>) {
        let mut x = x;
        for lyr in 0..layers {
            x = Block(width = 4 * (lyr + 1), name = format!("encoderblock_{lyr}"))(x);
        }
        let x = LayerNorm(name = format!("encoder_{}", "norm"))(x);
        Dense(2, name = "Transformer")(x)
    }
}

#[test]
fn names_from_format_and_capitals() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Encoder, f32>();
    // Fields: the names, snake-cased.
    let _ = (
        &m.encoderblock_0,
        &m.encoderblock_2.dense_1,
        &m.encoder_norm,
        &m.transformer,
    );
    // `Dense(8)(relu(Dense(width)(x)))`: the outer `Dense` is built first.
    assert_eq!(m.encoderblock_2.dense_1.weight.shape().0, Const::<12>);
    let paths: Vec<String> = FlaxLeaves::of::<EncoderModule<f32, Cpu>>()
        .leaves()
        .iter()
        .map(|l| format!("{} {}", l.key, l.flax_path()))
        .collect();
    for want in [
        "encoderblock_0.dense_0.weight params/encoderblock_0/Dense_0/kernel",
        "encoderblock_2.dense_1.bias params/encoderblock_2/Dense_1/bias",
        "encoder_norm.gamma params/encoder_norm/scale",
        "transformer.weight params/Transformer/kernel",
    ] {
        assert!(paths.iter().any(|p| p == want), "{want} not in {paths:?}");
    }
    let x: Tensor<Rank2<3, 8>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<3, 2>, f32, _> = m.forward(x);
}
