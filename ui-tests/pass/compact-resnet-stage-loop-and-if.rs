use flaxen::prelude::*;

/// A ResNet stage as Flax's `examples/imagenet` writes it: a loop over
/// blocks, a strided first block, a projection shortcut decided by an `if`.
pub struct Stage;

#[compact]
impl Stage {
    fn forward(x: Input<16, 32, 32>, features: Param<32>, blocks: Param<2>, strides: Param<2>) {
        let mut x = x;
        for i in 0..blocks {
            let s = if i == 0 { strides } else { 1 };
            let y = Conv(features = features, kernel_size = (3, 3), strides = (s, s), use_bias = false)(x);
            let y = relu(BatchNorm()(y));
            let y = BatchNorm()(Conv(features, (3, 3), use_bias = false)(y));
            let r = if s != 1 || x.shape[-3] != features {
                BatchNorm()(Conv(features, (1, 1), strides = (s, s), use_bias = false)(x))
            } else {
                x
            };
            x = relu(r + y);
        }
        x
    }
}

pub struct ResNet;

#[compact]
impl ResNet {
    fn forward(x: Input<3, 32, 32>) {
        let x = relu(BatchNorm()(Conv(16, (3, 3), use_bias = false)(x)));
        let x = Stage(features = 16, strides = 1)(x);
        let x = Stage(32)(x);
        let x = Stage(features = 64, blocks = 3)(x);
        let x = mean(x, axis = (-2, -1));
        Dense(10)(x)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<ResNet, f32>();
    // Flax's count: no conv biases; BatchNorm scale and bias per channel.
    let conv = |c: usize, o: usize, k: usize| c * o * k * k;
    let bn = |c: usize| 2 * c;
    let stage = |c: usize, f: usize, blocks: usize, strided: bool| {
        let mut n = 0;
        let mut c = c;
        for i in 0..blocks {
            n += conv(c, f, 3) + bn(f) + conv(f, f, 3) + bn(f);
            if (i == 0 && strided) || c != f {
                n += conv(c, f, 1) + bn(f);
            }
            c = f;
        }
        n
    };
    let want = conv(3, 16, 3) + bn(16) + stage(16, 16, 2, false) + stage(16, 32, 2, true) + stage(32, 64, 3, true) + 64 * 10 + 10;
    assert_eq!(m.num_trainable_params(), want);
    let x: Tensor<Rank4<2, 3, 32, 32>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x);
    let _ = &m.stage_2.conv_6;
}
