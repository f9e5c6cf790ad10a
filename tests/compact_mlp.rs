//! `#[compact]` MLPs: build, shapes, parameter count, keys, forward with and
//! without a tape, `Const` and `usize` batch.

use flaxen::prelude::*;

/// A two-layer MLP.
pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let x = Dense(features = 128)(x);
        let x = relu(x);
        Dense(10)(x)
    }
}

pub struct Everything;

#[compact]
impl Everything {
    fn forward(&self, x: Input<16>) {
        let h = LayerNorm()(x);
        let h = Dense(32, name = "proj")(h);
        let a = gelu(h) + silu(h) * 0.5;
        let b = tanh(sigmoid(a)) - 1.0;
        let c = 2.0 - b / 4.0;
        let d = -c + Dropout(0.25)(a);
        let e = BatchNorm(momentum = 0.9)(d);
        let y = Dense(features = 8, use_bias = false)(e);
        log_softmax(y) + softmax(y)
    }
}

#[test]
fn mlp_builds_and_runs() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Mlp, f32>();
    assert_eq!(m.num_trainable_params(), 784 * 128 + 128 + 128 * 10 + 10);
    let _: &modules::Linear<784, 128, f32, Cpu> = &m.dense_0;
    let x: Tensor<Rank2<3, 784>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank2<3, 10>, f32, _> = m.forward(x.clone());
    // usize batch
    let xd: Tensor<(usize, Const<784>), f32, _> = x.clone().realize();
    let yd = m.forward(xd);
    assert_eq!(yd.shape().0, 3);
    assert_eq!(yd.as_vec(), y.as_vec());
    // with a tape: gradients reach every parameter
    let mut grads = m.alloc_grads();
    let y = m.forward(x.clone().traced(grads));
    grads = y.sum().backward();
    assert!(grads
        .get(&m.dense_0.weight)
        .array()
        .iter()
        .flatten()
        .any(|g| *g != 0.0));
    // manual equivalent
    let h = m.dense_0.forward(x.clone()).relu();
    let want = m.dense_1.forward(h);
    assert_eq!(m.forward(x).as_vec(), want.as_vec());
}

#[test]
fn everything_builds_and_runs() {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Everything, f32>();
    assert_eq!(m.batch_norm_0.momentum, 1.0 - 0.9);
    assert_eq!(m.layer_norm_0.epsilon, 1e-6);
    assert_eq!(
        m.num_trainable_params(),
        2 * 16 + 16 * 32 + 32 + 2 * 32 + 32 * 8
    );
    let x: Tensor<Rank2<4, 16>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank2<4, 8>, f32, _> = m.forward(x.clone());
    assert!(y.as_vec().iter().all(|v| v.is_finite()));
    let grads = m.alloc_grads();
    let y = m.forward_mut(x.traced(grads));
    let g = y.mean().backward();
    assert!(g
        .get(&m.proj.weight)
        .array()
        .iter()
        .flatten()
        .any(|v| *v != 0.0));
}

#[test]
fn compact_consts() {
    use flaxen::runtime::compact::Compact;
    assert_eq!(<Mlp as Compact>::IN_RANK, 1);
    assert_eq!(<Mlp as Compact>::IN_0, 784);
    assert_eq!(<Mlp as Compact>::OUT_0, 10);
    assert_eq!(<Mlp as Compact>::NUM_PARAMS, 784 * 128 + 128 + 1290);
}
