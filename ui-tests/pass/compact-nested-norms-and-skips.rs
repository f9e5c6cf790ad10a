use flaxen::prelude::*;

/// A block with a GroupNorm, a skip joined by `concatenate`, and a
/// `features` attribute.
pub struct Down;

#[compact]
impl Down {
    fn forward(x: Input<8, 8, 8>, features: Param<8>) {
        let h = silu(GroupNorm(num_groups = 4)(Conv(features, (3, 3))(x)));
        concatenate((x, h), axis = -3)
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 8, 8>) {
        let x = Conv(8, (3, 3))(x);
        let x = Down(features = 8)(x);
        let x = RMSNorm()(mean(x, axis = (-2, -1)));
        Dense(10)(x)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Net, f32>();
    let x: Tensor<Rank4<2, 1, 8, 8>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank2<2, 10>, f32, _, _> = m.forward(NoInputGrad(x.leaky_trace()));
    let _ = y.mean().backward();
    let _ = &m.down_0.group_norm_0.scale;
    let _ = &m.rms_norm_0.scale;
}
