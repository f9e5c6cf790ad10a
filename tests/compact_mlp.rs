//! `#[compact]` MLPs: build, shapes, parameter count, keys, forward with and
//! without a tape, `Const` and `usize` batch.

use flaxen::dfdx::tensor_ops::RealizeTo;
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
    let _: &flaxen::runtime::layers::Dense<784, 128, f32, Cpu> = &m.dense_0;
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
    // `NoInputGrad` is accepted without a convolution and changes nothing.
    let marked = m.forward(NoInputGrad(x.leaky_trace())).sum().backward();
    let plain = m.forward(x.leaky_trace()).sum().backward();
    assert_eq!(marked.get(&x).as_vec(), plain.get(&x).as_vec());
    // manual equivalent
    let h = m.dense_0.forward(x.clone()).relu();
    let want = m.dense_1.forward(h);
    assert_eq!(m.forward(x).as_vec(), want.as_vec());
}

#[test]
fn everything_builds_and_runs() {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Everything, f32>();
    assert_eq!(m.batch_norm_0.momentum, 0.9);
    assert_eq!(m.batch_norm_0.epsilon, 1e-5);
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

#[test]
fn tensor_collection_services() {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Everything, f32>();

    // Checkpoint keys are the layer names.
    let dir = std::env::temp_dir().join(format!("flaxen-compact-mlp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.safetensors");
    m.save_safetensors(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut keys: Vec<&str> = header
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.retain(|k| *k != "__metadata__");
    keys.sort();
    assert_eq!(
        keys,
        [
            "batch_norm_0.bias",
            "batch_norm_0.epsilon",
            "batch_norm_0.momentum",
            "batch_norm_0.running_mean",
            "batch_norm_0.running_var",
            "batch_norm_0.scale",
            "dense_0.weight",
            "layer_norm_0.beta",
            "layer_norm_0.epsilon",
            "layer_norm_0.gamma",
            "proj.bias",
            "proj.weight",
        ]
    );

    // Load into a fresh model: same outputs.
    let mut other = dev.build_module::<Everything, f32>();
    other.load_safetensors(&path).unwrap();
    let x: Tensor<Rank2<4, 16>, f32, _> = dev.sample_normal();
    assert_eq!(
        m.forward(x.clone()).as_vec(),
        other.forward(x.clone()).as_vec()
    );
    let _ = std::fs::remove_dir_all(&dir);

    // reset_params, to_device, to_dtype, zero_grads, an optimizer step.
    m.reset_params();
    let _: EverythingModule<f32, Cpu> = m.to_device(&dev);
    let _: EverythingModule<f64, Cpu> = m.to_dtype::<f64>();
    let mut opt = flaxen::dfdx::optim::Sgd::new(&m, Default::default());
    let mut grads = m.alloc_grads();
    let y = m.forward_mut(x.traced(grads));
    grads = y.square().mean().backward();
    let before = m.proj.weight.as_vec();
    flaxen::dfdx::optim::Optimizer::update(&mut opt, &mut m, &grads).unwrap();
    assert_ne!(before, m.proj.weight.as_vec());
    m.zero_grads(&mut grads);
}

#[cfg(feature = "f16")]
#[test]
fn half_precision() {
    use flaxen::dfdx::dtypes::{f16, AMP};
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Mlp, f16>();
    let x: Tensor<Rank2<2, 784>, f16, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f16, _> = m.forward(x);
    let m = dev.build_module::<Mlp, AMP<f16>>();
    let x: Tensor<Rank2<2, 784>, AMP<f16>, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, AMP<f16>, _> = m.forward(x);
}

/// More layers than dfdx's field tuples hold (6): the expansion nests them.
pub struct Deep;

#[compact]
impl Deep {
    fn forward(x: Input<3>) {
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        let x = relu(Dense(4)(x));
        Dense(2, name = "head")(x)
    }
}

#[test]
fn many_layers() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Deep, f32>();
    assert_eq!(
        m.num_trainable_params(),
        3 * 4 + 4 + 12 * (4 * 4 + 4) + 4 * 2 + 2
    );
    let _ = &m.dense_12;
    let x: Tensor<Rank2<2, 3>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 2>, f32, _> = m.forward(x);
}

/// Dense layers with and without bias, on sequences and on features.
pub struct Denses;

#[compact]
impl Denses {
    fn forward(x: Input<4, 512>) {
        let x = Dense(256)(x);
        let x = Dense(512, use_bias = false)(flatten(x));
        Dense(8)(x)
    }
}

/// Every `Dense` gets Flax's initialisation (lecun_normal kernel, zero
/// bias), whatever its input rank and bias: the standard deviation of each
/// kernel is within 5% of `1 / sqrt(fan_in)`, and no value is beyond the
/// truncation at two standard deviations of the untruncated normal.
#[test]
fn every_dense_has_flax_init() {
    use flaxen::runtime::layers::{Dense, UnbiasedDense};
    let dev = Cpu::seed_from_u64(0);
    let m = dev.build_module::<Denses, f32>();
    let _: &Dense<512, 256, f32, Cpu> = &m.dense_0;
    let _: &UnbiasedDense<1024, 512, f32, Cpu> = &m.dense_1;
    assert!(m.dense_0.bias.as_vec().iter().all(|b| *b == 0.0));
    assert!(m.dense_2.bias.as_vec().iter().all(|b| *b == 0.0));
    for (what, w, fan_in) in [
        ("dense_0", m.dense_0.weight.as_vec(), 512.0f64),
        ("dense_1", m.dense_1.weight.as_vec(), 1024.0),
        ("dense_2", m.dense_2.weight.as_vec(), 512.0),
    ] {
        let n = w.len() as f64;
        let mean = w.iter().map(|v| *v as f64).sum::<f64>() / n;
        let std = (w.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        let want = fan_in.powf(-0.5);
        assert!(
            (std / want - 1.0).abs() < 0.05,
            "{what}: std {std}, want {want}"
        );
        let bound = 2.0 * want / 0.879_625_661_034_239_8;
        assert!(
            w.iter().all(|v| (*v as f64).abs() <= bound + 1e-6),
            "{what}: truncation"
        );
    }
    let x: Tensor<Rank3<2, 4, 512>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 8>, f32, _> = m.forward(x);
}

/// Attention, norms, activations, a concatenation and a reduction.
pub struct Mixed;

#[compact]
impl Mixed {
    fn forward(x: Input<4, 8>) {
        let h = x + SelfAttention(2)(LayerNorm()(x));
        let h = concatenate((h, silu(h)), axis = -1);
        let h = RMSNorm()(elu(Dense(8)(h)));
        Dense(3)(mean(h, axis = -2))
    }
}

/// GroupNorm, BatchNorm and a hard activation on images.
pub struct MixedImage;

#[compact]
impl MixedImage {
    fn forward(x: Input<4, 6, 6>) {
        let h = GroupNorm(num_groups = 2)(Conv(4, (3, 3))(x));
        let h = BatchNorm()(hard_silu(h));
        Dense(2)(mean(h, axis = (-2, -1)))
    }
}

/// The newer layers in `f16` and `AMP<f16>`: the same parameters converted
/// from f32 give the f32 outputs within half precision (2e-2 relative).
#[cfg(feature = "f16")]
#[test]
fn half_precision_of_the_newer_layers() {
    use flaxen::dfdx::dtypes::{f16, AMP};
    fn close<E: Dtype>(what: &str, got: Vec<E>, want: &[f32]) {
        for (g, w) in got.iter().zip(want) {
            let g = g.to_f32().unwrap();
            assert!(
                (g - w).abs() <= 2e-2 * w.abs().max(1.0),
                "{what}: {g} vs {w}"
            );
        }
    }
    let dev = Cpu::seed_from_u64(6);
    let m = dev.build_module::<Mixed, f32>();
    let x: Tensor<Rank3<2, 4, 8>, f32, _> = dev.sample_normal();
    let want = m.forward(x.clone()).as_vec();
    close(
        "f16",
        m.to_dtype::<f16>()
            .forward(x.clone().to_dtype::<f16>())
            .as_vec(),
        &want,
    );
    let amp = m.to_dtype::<AMP<f16>>();
    close(
        "AMP<f16>",
        amp.forward(x.clone().to_dtype::<AMP<f16>>()).as_vec(),
        &want,
    );
    let g = amp
        .forward(x.clone().to_dtype::<AMP<f16>>().leaky_trace())
        .square()
        .mean()
        .backward();
    let gq = g.get(&amp.self_attention_0.query.weight).as_vec();
    assert!(gq.iter().all(|v| v.0.is_finite()) && gq.iter().any(|v| v.0 != f16::ZERO));

    let mut m = dev.build_module::<MixedImage, f32>();
    let x: Tensor<Rank4<3, 4, 6, 6>, f32, _> = dev.sample_normal();
    let want = m.forward(x.clone()).as_vec();
    let mut amp = m.to_dtype::<AMP<f16>>();
    close(
        "image AMP<f16>",
        amp.forward(x.clone().to_dtype::<AMP<f16>>()).as_vec(),
        &want,
    );
    // Training mode updates the running statistics in both precisions alike.
    let _ = m.forward_mut(x.leaky_trace());
    let _ = amp.forward_mut(x.clone().to_dtype::<AMP<f16>>().leaky_trace());
    close(
        "running_var",
        amp.batch_norm_0.running_var.as_vec(),
        &m.batch_norm_0.running_var.as_vec(),
    );
}
