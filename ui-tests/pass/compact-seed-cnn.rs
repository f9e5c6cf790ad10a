use flaxen::prelude::*;

/// The seed CNN. Inputs are NCHW; the batch axis is implicit.
pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 28, 28>) {
        let x = Conv(features = 32, kernel_size = (3, 3))(x);
        let x = relu(x);
        let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
        let x = Conv(features = 64, kernel_size = (3, 3))(x);
        let x = relu(x);
        let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
        let x = flatten(x);
        let x = Dense(features = 256)(x);
        let x = relu(x);
        Dense(features = 10)(x)
    }
}

fn main() {
    let dev = AutoDevice::default();
    let model = dev.build_module::<Cnn, f32>();
    let x: Tensor<Rank4<2, 1, 28, 28>, f32, _> = dev.sample_normal();
    let logits: Tensor<Rank2<2, 10>, f32, _> = model.forward(x);
    let _ = logits;
}
