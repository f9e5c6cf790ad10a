//! Flax parity of models written in `#[compact]`'s Flax-like syntax (loops
//! over blocks, widths from module attributes, `use_bias = false`, nested
//! modules with attributes, `x.shape[..]`) against the same models in Flax
//! linen (`tests/fixtures/flax_compact_v2.json`, made by
//! `tests/python/make_flax_compact_v2.py`): the fixture's random parameters
//! are loaded by checkpoint key, then the output, the input gradient, every
//! parameter gradient, BatchNorm's running statistics and the parameter
//! count are compared, in f64 within `1e-9` and f32 within `1e-4` (relative
//! to `max(|flax|, 1)`).

#[path = "common/fixture.rs"]
mod fixture;

#[allow(unused_macros, unused_imports)]
#[path = "common/norm_act.rs"]
mod norm_act;

#[path = "common/compact_v2.rs"]
mod compact_v2;

use compact_v2::{check_case, check_eval, fixture};
use flaxen::prelude::*;

pub struct Stage;
#[compact]
impl Stage {
    fn forward(x: Input<16, 8, 8>, features: Param<32>, blocks: Param<2>, strides: Param<2>) {
        let mut x = x;
        for i in 0..blocks {
            let s = if i == 0 { strides } else { 1 };
            let y = Conv(
                features = features,
                kernel_size = (3, 3),
                strides = (s, s),
                use_bias = false,
            )(x);
            let y = relu(BatchNorm()(y));
            let y = BatchNorm()(Conv(features, (3, 3), use_bias = false)(y));
            let r = if s != 1 || x.shape[-3] != features {
                BatchNorm()(Conv(features, (1, 1), strides = (s, s), use_bias = false)(
                    x,
                ))
            } else {
                x
            };
            x = relu(r + y);
        }
        x
    }
}

pub struct EncoderBlock;
#[compact]
impl EncoderBlock {
    fn forward(x: Input<8, 32>, num_heads: Param<4>, mlp_dim: Param<64>) {
        let y = LayerNorm()(x);
        let y = SelfAttention(num_heads = num_heads)(y);
        let x = x + y;
        let y = LayerNorm()(x);
        let y = Dense(mlp_dim)(y);
        let y = gelu(y);
        let y = Dense(x.shape[-1])(y);
        x + y
    }
}

pub struct Encoder;
#[compact]
impl Encoder {
    fn forward(x: Input<8, 32>, num_layers: Param<2>) {
        let mut x = x;
        for _ in 0..num_layers {
            x = EncoderBlock(num_heads = 4, mlp_dim = 64)(x);
        }
        LayerNorm()(x)
    }
}

pub struct Mlp;
#[compact]
impl Mlp {
    fn forward(&self, x: Input<20>, hidden: Param<24>, depth: Param<3>, out: Param<10>) {
        let mut x = x;
        for i in 0..self.depth {
            x = relu(Dense(self.hidden * (i + 1))(x));
        }
        Dense(self.out)(x)
    }
}

type StageX = Rank4<3, 16, 8, 8>;
type StageY = Rank4<3, 32, 4, 4>;

/// Training mode (batch statistics; Flax's `mutable=['batch_stats']`), then
/// inference with the fixture's running statistics.
#[test]
fn resnet_stage_matches_flax() {
    let dev: Cpu = Default::default();
    let f = fixture();
    check_case!(&dev, Stage, f64, &f.stage, StageX, StageY, forward_mut);
    check_eval!(&dev, Stage, f64, &f.stage, StageX);
}

#[test]
fn resnet_stage_matches_flax_in_f32() {
    let dev: Cpu = Default::default();
    let f = fixture();
    check_case!(&dev, Stage, f32, &f.stage, StageX, StageY, forward_mut);
    check_eval!(&dev, Stage, f32, &f.stage, StageX);
}

#[test]
fn transformer_encoder_matches_flax() {
    let dev: Cpu = Default::default();
    let f = fixture();
    type X = Rank3<3, 8, 32>;
    check_case!(&dev, Encoder, f64, &f.encoder, X, X, forward);
    check_case!(&dev, Encoder, f32, &f.encoder, X, X, forward);
}

#[test]
fn mlp_with_attribute_widths_matches_flax() {
    let dev: Cpu = Default::default();
    let f = fixture();
    check_case!(&dev, Mlp, f64, &f.mlp, Rank2<3, 20>, Rank2<3, 10>, forward);
    check_case!(&dev, Mlp, f32, &f.mlp, Rank2<3, 20>, Rank2<3, 10>, forward);
}
