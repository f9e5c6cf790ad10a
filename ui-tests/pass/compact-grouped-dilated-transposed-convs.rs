use flaxen::prelude::*;

/// A depthwise-separable, dilated encoder and a transposed-conv decoder, as
/// a Flax user writes them.
pub struct AutoEncoder;

#[compact]
impl AutoEncoder {
    fn forward(x: Input<4, 8, 8>) {
        // Depthwise (one group per channel), then pointwise.
        let x = Conv(8, (3, 3), feature_group_count = 4)(x);
        let x = Conv(8, (1, 1))(x);
        let x = relu(x);
        // Dilated, and Flax's positional order: strides, padding,
        // input_dilation, kernel_dilation, feature_group_count.
        let x = Conv(8, (3, 3), (2, 2), SAME, 1, 2, 2)(x);
        let x = relu(x);
        // [8, 4, 4] -> [4, 8, 8] (SAME: size * stride).
        let x = ConvTranspose(features = 4, kernel_size = (3, 3), strides = (2, 2))(x);
        let x = relu(x);
        ConvTranspose(4, (2, 2), padding = VALID, use_bias = false)(x)
    }
}

fn main() {
    let dev = Cpu::default();
    let model = dev.build_module::<AutoEncoder, f32>();
    // 8*1*9+8, 8*8+8, 8*4*9+8, 4*8*9+4, 4*4*4.
    assert_eq!(model.num_trainable_params(), 80 + 72 + 296 + 292 + 64);
    let x: Tensor<Rank4<2, 4, 8, 8>, f32, _> = dev.sample_normal();
    // VALID with a 2x2 kernel at stride 1: 8 + 1.
    let y: Tensor<Rank4<2, 4, 9, 9>, f32, _, _> = model.forward(x.leaky_trace());
    let _ = y.sum().backward();
}
