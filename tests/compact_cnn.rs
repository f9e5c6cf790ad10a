//! The seed CNN written with `#[compact]`: inferred sizes, parameter count,
//! equality with the same model written by hand from the runtime layers
//! (outputs and gradients), and Flax parity through safetensors keys.

use flaxen::dfdx::losses::cross_entropy_with_logits_loss;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::dfdx::tensor_ops::RealizeTo;
use flaxen::prelude::*;
use flaxen::runtime::layers::{self, AvgPool2D, Flatten2D};

#[path = "common/flax_cnn.rs"]
mod flax_cnn;

flax_cnn::seed_cnn!(
    /// The seed CNN (Conv 32, avg_pool, Conv 64, avg_pool, Dense 256, Dense 10).
    Cnn: 28, conv(32, 64), dense(256), out(10)
);

/// The same network written by hand from the runtime layers.
type HandCnn = (
    (
        layers::builder::Conv2D<1, 32, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28, 28, 28>,
        ReLU,
        AvgPool2D<32, 2, 2, 2, 2, 0, 0, 0, 0, 28, 28, 14, 14>,
        layers::builder::Conv2D<32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14, 14, 14>,
        ReLU,
        AvgPool2D<64, 2, 2, 2, 2, 0, 0, 0, 0, 14, 14, 7, 7>,
    ),
    (
        Flatten2D<64, 7, 7, 3136>,
        layers::builder::Dense<3136, 256>,
        ReLU,
        layers::builder::Dense<256, 10>,
    ),
);

#[test]
fn seed_cnn_infers_sizes_and_counts_params() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Cnn, f32>();
    // The in-features of the first Dense were inferred: 64 * 7 * 7.
    let _: &layers::Dense<3136, 256, f32, Cpu> = &m.dense_0;
    assert_eq!(m.num_trainable_params(), 824_458);
    assert_eq!(
        <Cnn as flaxen::runtime::compact::Compact>::NUM_PARAMS,
        824_458
    );
    let x: Tensor<Rank4<2, 1, 28, 28>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x.clone());
    let xd: Tensor<(usize, Const<1>, Const<28>, Const<28>), f32, _> = x.realize();
    let y = m.forward(xd);
    assert_eq!(y.shape().0, 2);
}

#[test]
fn dsl_equals_hand_written() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Cnn, f32>();
    let mut h = dev.build_module::<HandCnn, f32>();
    h.0 .0.weight = m.conv_0.weight.clone();
    h.0 .0.bias = m.conv_0.bias.clone();
    h.0 .3.weight = m.conv_1.weight.clone();
    h.0 .3.bias = m.conv_1.bias.clone();
    h.1 .1.weight = m.dense_0.weight.clone();
    h.1 .1.bias = m.dense_0.bias.clone();
    h.1 .3.weight = m.dense_1.weight.clone();
    h.1 .3.bias = m.dense_1.bias.clone();

    let x: Tensor<Rank4<4, 1, 28, 28>, f32, _> = dev.sample_normal();
    assert_eq!(m.forward(x.clone()).as_vec(), h.forward(x.clone()).as_vec());

    let gm = m.alloc_grads();
    let gm = m.forward(x.clone().traced(gm)).square().mean().backward();
    let gh = h.alloc_grads();
    let gh = h.forward(x.traced(gh)).square().mean().backward();
    assert_eq!(
        gm.get(&m.conv_0.weight).as_vec(),
        gh.get(&h.0 .0.weight).as_vec()
    );
    assert_eq!(
        gm.get(&m.conv_1.bias).as_vec(),
        gh.get(&h.0 .3.bias).as_vec()
    );
    assert_eq!(
        gm.get(&m.dense_0.weight).as_vec(),
        gh.get(&h.1 .1.weight).as_vec()
    );
    assert_eq!(
        gm.get(&m.dense_1.bias).as_vec(),
        gh.get(&h.1 .3.bias).as_vec()
    );
}

/// `model.forward(NoInputGrad(x))`: the first convolution skips the input's
/// gradient and nothing else changes — every parameter gradient is the same
/// bit for bit, through `Module` and `ModuleMut`, and the input has none.
#[test]
fn no_input_grad_skips_only_the_input_gradient() {
    let dev = Cpu::seed_from_u64(4);
    let mut m = dev.build_module::<Cnn, f32>();
    let x: Tensor<Rank4<3, 1, 28, 28>, f32, _> = dev.sample_normal();
    let loss = |y: Tensor<Rank2<3, 10>, f32, Cpu, OwnedTape<f32, Cpu>>| y.square().mean();
    let plain = loss(m.forward(x.leaky_trace())).backward();
    let skipped = loss(m.forward(NoInputGrad(x.leaky_trace()))).backward();
    let skipped_mut = loss(m.forward_mut(NoInputGrad(x.leaky_trace()))).backward();
    let all = |g: &Gradients<f32, Cpu>| {
        [
            g.get(&m.conv_0.weight).as_vec(),
            g.get(&m.conv_0.bias).as_vec(),
            g.get(&m.conv_1.weight).as_vec(),
            g.get(&m.conv_1.bias).as_vec(),
            g.get(&m.dense_0.weight).as_vec(),
            g.get(&m.dense_0.bias).as_vec(),
            g.get(&m.dense_1.weight).as_vec(),
            g.get(&m.dense_1.bias).as_vec(),
        ]
    };
    assert_eq!(all(&skipped), all(&plain));
    assert_eq!(all(&skipped_mut), all(&plain));
    assert!(plain.get(&x).as_vec().iter().any(|g| *g != 0.0));
    let missing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| skipped.get(&x)));
    assert!(missing.is_err(), "x has no gradient");
    // Without a tape it is the plain forward pass.
    assert_eq!(
        m.forward(NoInputGrad(x.clone())).as_vec(),
        m.forward(x).as_vec()
    );
}

flax_cnn::fixture_cnn!(SmallCnn);

/// Writes a safetensors file by hand (8-byte header length, JSON header,
/// little-endian data), as Python's `safetensors` would.
fn write_safetensors(path: &std::path::Path, tensors: &[(String, &flax_cnn::Arr)]) {
    let mut header = serde_json::Map::new();
    let mut bytes = Vec::new();
    for (k, a) in tensors {
        let start = bytes.len();
        for v in &a.data {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        header.insert(
            k.clone(),
            serde_json::json!({"dtype": "F32", "shape": a.shape, "data_offsets": [start, bytes.len()]}),
        );
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&bytes);
    std::fs::write(path, out).unwrap();
}

#[test]
fn flax_first_loss_through_safetensors_keys() {
    let f = flax_cnn::fixture();
    // Flax's parameter names -> the DSL's checkpoint keys.
    let tensors: Vec<(String, &flax_cnn::Arr)> = f
        .init_params
        .iter()
        .map(|(k, v)| (flax_cnn::key(k), v))
        .collect();
    let dir = std::env::temp_dir().join(format!("flaxen-compact-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("init.safetensors");
    write_safetensors(&path, &tensors);

    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<SmallCnn, f32>();
    m.load_safetensors(&path).unwrap();
    assert_eq!(
        m.conv_0.weight.as_vec(),
        f.init_params["conv0.weight_oihw"].data
    );

    let n = 4 * 64;
    let x: Tensor<Rank4<4, 1, 8, 8>, f32, _> = dev.tensor(f.xs.data[..n].to_vec());
    let mut onehot = vec![0.0f32; 40];
    for (i, l) in f.labels[0].iter().enumerate() {
        onehot[i * 10 + l] = 1.0;
    }
    let y: Tensor<Rank2<4, 10>, f32, _> = dev.tensor(onehot);
    let loss = cross_entropy_with_logits_loss(m.forward(x), y).array();
    assert!(
        (loss - f.losses[0]).abs() < 1e-5,
        "loss {loss} vs Flax {}",
        f.losses[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
