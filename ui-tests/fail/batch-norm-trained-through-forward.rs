use flaxen::prelude::*;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<8>) {
        let x = BatchNorm()(Dense(16)(x));
        Dense(2)(relu(x))
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Net, f32>();
    let x: Tensor<Rank2<4, 8>, f32, _> = dev.sample_normal();
    // Training needs `forward_mut`: `forward` is inference, without a tape.
    let _ = m.forward(x.leaky_trace());
}
