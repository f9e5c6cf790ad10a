//! Nesting: a `#[compact]` model used as a layer of another one.

use flaxen::prelude::*;
use flaxen::runtime::compact::Compact;

/// A residual MLP block on 32 features.
pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<32>) {
        let h = relu(Dense(64)(x));
        Dense(32)(h)
    }
}

/// Two residual blocks between an input and an output projection.
pub struct ResNet;

#[compact]
impl ResNet {
    fn forward(x: Input<10>) {
        let x = Dense(32)(x);
        let x = x + Block()(x);
        let x = x + Block(name = "second")(x);
        let x = relu(x);
        Dense(3)(x)
    }
}

/// A conv block that keeps its shape, nested in a CNN, followed by layers
/// whose sizes depend on the block's output consts.
pub struct ConvBlock;

#[compact]
impl ConvBlock {
    fn forward(x: Input<4, 6, 6>) {
        relu(Conv(4, (3, 3))(x))
    }
}

pub struct Outer;

#[compact]
impl Outer {
    fn forward(x: Input<1, 6, 6>) {
        let x = Conv(4, 3)(x);
        let y = ConvBlock()(x);
        let y = avg_pool(y + x, (2, 2), strides = (2, 2));
        Dense(2)(flatten(y))
    }
}

#[test]
fn residual_blocks() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<ResNet, f32>();
    let block = 32 * 64 + 64 + 64 * 32 + 32;
    assert_eq!(<Block as Compact>::NUM_PARAMS, block);
    assert_eq!(
        m.num_trainable_params(),
        10 * 32 + 32 + 2 * block + 32 * 3 + 3
    );
    assert_eq!(<ResNet as Compact>::NUM_PARAMS, m.num_trainable_params());
    let x: Tensor<Rank2<5, 10>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank2<5, 3>, f32, _> = m.forward(x.clone());

    // The same computation by hand.
    let h = m.dense_0.forward(x.clone());
    let h = h.clone() + m.block_0.forward(h);
    let h = h.clone() + m.second.forward(h);
    let want = m.dense_1.forward(h.relu());
    assert_eq!(y.as_vec(), want.as_vec());

    // Gradients reach the nested blocks' parameters through both branches.
    let g = m.alloc_grads();
    let g = m.forward(x.traced(g)).sum().backward();
    assert!(g
        .get(&m.second.dense_0.weight)
        .as_vec()
        .iter()
        .any(|v| *v != 0.0));
}

#[test]
fn nested_shapes_flow_through_consts() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Outer, f32>();
    assert_eq!(<Outer as Compact>::OUT_0, 2);
    let conv = 4 * 9 + 4; // 1 input channel
    let inner = 4 * 4 * 9 + 4;
    assert_eq!(m.num_trainable_params(), conv + inner + 4 * 3 * 3 * 2 + 2);
    let x: Tensor<Rank4<3, 1, 6, 6>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<3, 2>, f32, _> = m.forward(x);
}

/// A block with Flax-style attributes: instantiated for its caller's input
/// shape with the caller's values.
pub struct Mix;

#[compact]
impl Mix {
    fn forward(x: Input<4, 6, 6>, features: Param<4>, kernel: Param<3>) {
        let h = relu(Conv(features, kernel)(x));
        Conv(features, (1, 1))(h)
    }
}

pub struct Tower;

#[compact]
impl Tower {
    fn forward(x: Input<3, 8, 8>) {
        let y = Mix(features = 16)(x);
        let y = y + Mix(features = 16, kernel = 5, name = "wide")(y);
        let y = avg_pool(y, (2, 2), strides = (2, 2));
        let y = Mix(features = 4, kernel = 1)(y);
        Dense(10)(flatten(y))
    }
}

#[test]
fn nested_with_parameters() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Tower, f32>();
    // `Mix(features = 16)` on a 3-channel input; the default instance as written.
    let mix_0 = 16 * 3 * 9 + 16 + 16 * 16 + 16;
    let wide = 16 * 16 * 25 + 16 + 16 * 16 + 16;
    let mix_2 = 4 * 16 + 4 + 4 * 4 + 4;
    let dense = 4 * 4 * 4 * 10 + 10;
    assert_eq!(m.num_trainable_params(), mix_0 + wide + mix_2 + dense);
    assert_eq!(<Tower as Compact>::NUM_PARAMS, m.num_trainable_params());
    // The model as written keeps its defaults.
    assert_eq!(<Mix as Compact>::NUM_PARAMS, 4 * 4 * 9 + 4 + 4 * 4 + 4);
    let _: &flaxen::runtime::layers::Conv2D<3, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8, f32, Cpu> =
        &m.mix_0.conv_0;
    let _: &flaxen::runtime::layers::Conv2D<16, 16, 5, 5, 1, 1, 2, 2, 2, 2, 8, 8, 8, 8, f32, Cpu> =
        &m.wide.conv_0;
    let x: Tensor<Rank4<2, 3, 8, 8>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x);
}

/// Two heads returned as a tuple.
pub struct Heads;

#[compact]
impl Heads {
    fn forward(x: Input<6>) {
        (Dense(2)(x), Dense(3)(x))
    }
}

/// A model bound once (`let block = Block(..)`) and applied twice is one
/// field, Flax's `block = Block(..)` then `block(block(x))`; a bound model
/// with several outputs gives them each time.
pub struct Twice;

#[compact]
impl Twice {
    fn forward(x: Input<6>) {
        let block = Residual(6);
        let heads = Heads(name = "heads");
        let y = block(block(x));
        let (a, b) = heads(y);
        let (c, d) = heads(x);
        (a + c, b + d)
    }
}

/// `x + Dense(features)(relu(x))`.
pub struct Residual;

#[compact]
impl Residual {
    fn forward(x: Input<6>, features: Param<6>) {
        x + Dense(features)(relu(x))
    }
}

#[test]
fn a_bound_model_applied_twice_is_one_field() {
    let dev = Cpu::seed_from_u64(2);
    let m = dev.build_module::<Twice, f64>();
    let x: Tensor<Rank2<3, 6>, f64, Cpu> = dev.sample_normal();
    // One `residual_0` and one `heads`: 6 * 6 + 6, then 6 * 2 + 2 + 6 * 3 + 3.
    assert_eq!(m.num_trainable_params(), 42 + 35);
    let (ab, bd) = m.forward(x.clone());
    let y = m.residual_0.forward(m.residual_0.forward(x.clone()));
    let (a, b) = m.heads.forward(y);
    let (c, d) = m.heads.forward(x.clone());
    assert_eq!(ab.as_vec(), (a + c).as_vec());
    assert_eq!(bd.as_vec(), (b + d).as_vec());
    // The shared block's gradient sums both applications'.
    let (ab, bd) = m.forward(x.leaky_trace());
    let g = (ab.sum() + bd.sum()).backward();
    assert!(g
        .get(&m.residual_0.dense_0.weight)
        .as_vec()
        .iter()
        .any(|v| *v != 0.0));
}
