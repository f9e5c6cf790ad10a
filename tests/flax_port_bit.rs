//! google-research/vision_transformer's ResNet (`vit_jax/models_resnet.py`:
//! `StdConv`, `ResidualUnit`, `ResNetStage`) under the root of
//! `models_vit.py`'s hybrid branch (`conv_root`, `gn_root`, max pooling,
//! `block1`, `block{i + 1}`), ported as written: weight-standardised
//! convolutions, GroupNorm everywhere, `gn3`'s zero scale init, the
//! projection when the shapes differ. Fixture:
//! `tests/python/make_flax_bit.py` (`flax_port_bit.{msgpack,json}`), a
//! perturbed checkpoint as `to_bytes` wrote it.
//!
//! Checked: parameter count (137120) and paths equal Flax's, the
//! checkpoint loads and saves back, outputs within 1e-5 (f32) and 1e-9
//! (f64), gradients within 1e-4 (f32) and 1e-9 (f64) of Flax's float64
//! run, and a training step.

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/flax_files.rs"]
mod flax_files;

use fixture::{assert_rel, Arr};
use flax_files::{assert_grads, f32s, fixture, flax_grads, load_as_flax_wrote_it};
use flaxen::interop::flax;
use flaxen::prelude::*;
use flaxen::runtime::train_state::TrainState;
use std::collections::BTreeMap;

/// `ResidualUnit(features, strides)`: the bottleneck unit.
pub struct ResidualUnit;

#[compact]
impl ResidualUnit {
    fn forward(x: Input<32, 8, 8>, features: Param<32>, strides: Param<{ (1, 1) }>) {
        let needs_projection = x.shape[-3] != features * 4 || strides != (1, 1);
        let residual = if needs_projection {
            let r = StdConv(
                features = features * 4,
                kernel_size = (1, 1),
                strides = strides,
                use_bias = false,
                name = "conv_proj",
            )(x);
            GroupNorm(name = "gn_proj")(r)
        } else {
            x
        };
        let y = StdConv(
            features = features,
            kernel_size = (1, 1),
            use_bias = false,
            name = "conv1",
        )(x);
        let y = GroupNorm(name = "gn1")(y);
        let y = relu(y);
        let y = StdConv(
            features = features,
            kernel_size = (3, 3),
            strides = strides,
            use_bias = false,
            name = "conv2",
        )(y);
        let y = GroupNorm(name = "gn2")(y);
        let y = relu(y);
        let y = StdConv(
            features = features * 4,
            kernel_size = (1, 1),
            use_bias = false,
            name = "conv3",
        )(y);
        let y = GroupNorm(name = "gn3", scale_init = zeros)(y);
        relu(residual + y)
    }
}

/// `ResNetStage(block_size, nout, first_stride)`.
pub struct ResNetStage;

#[compact]
impl ResNetStage {
    fn forward(
        x: Input<32, 8, 8>,
        block_size: Param<2>,
        nout: Param<32>,
        first_stride: Param<{ (1, 1) }>,
    ) {
        let mut x = ResidualUnit(nout, strides = first_stride, name = "unit1")(x);
        for i in 1..block_size {
            x = ResidualUnit(nout, strides = (1, 1), name = format!("unit{}", i + 1))(x);
        }
        x
    }
}

/// The hybrid ViT's ResNet root and stages (`width = 32`, `num_layers =
/// (2, 1)`) on NCHW `[3, 32, 32]`.
pub struct ResNetBackbone;

#[compact]
impl ResNetBackbone {
    fn forward(x: Input<3, 32, 32>, width: Param<32>, num_layers: Param<{ (2, 1) }>) {
        let x = StdConv(
            features = width,
            kernel_size = (7, 7),
            strides = (2, 2),
            use_bias = false,
            name = "conv_root",
        )(x);
        let x = GroupNorm(name = "gn_root")(x);
        let x = relu(x);
        let x = max_pool(x, (3, 3), strides = (2, 2), padding = SAME);
        let mut x = ResNetStage(
            block_size = num_layers[0],
            nout = width,
            first_stride = (1, 1),
            name = "block1",
        )(x);
        for (i, block_size) in enumerate(num_layers[1..], 1) {
            x = ResNetStage(
                block_size = block_size,
                nout = width * 2 * *i,
                first_stride = (2, 2),
                name = format!("block{}", i + 1),
            )(x);
        }
        x
    }
}

#[derive(serde::Deserialize)]
struct Extra {
    loss: f64,
    out_f64: Arr,
    kernel_grads: BTreeMap<String, Arr>,
    kernel_grads_f64: BTreeMap<String, Arr>,
    kernel_grad_channels: BTreeMap<String, Vec<usize>>,
}

const BYTES: &[u8] = include_bytes!("fixtures/flax_port_bit.msgpack");
const JSON: &str = include_str!("fixtures/flax_port_bit.json");

/// A Flax `(kh, kw, in, out)` kernel's values at some output channels.
fn channels(full: &[f64], shape: &[usize], picked: &[usize]) -> Vec<f64> {
    let out = shape[3];
    let rows = full.len() / out;
    (0..rows)
        .flat_map(|r| picked.iter().map(move |&c| full[r * out + c]))
        .collect()
}

fn check_grads(got: &BTreeMap<String, Vec<f64>>, f: &flax_files::FlaxFixture, e: &Extra, rel: f64) {
    assert_grads(got, &f.grads_f64, rel);
    for (p, g) in &e.kernel_grads_f64 {
        let shape = &e.kernel_grads[p].shape;
        let mut full_shape = shape.clone();
        full_shape[3] = got[p].len() / shape[..3].iter().product::<usize>();
        let picked = channels(&got[p], &full_shape, &e.kernel_grad_channels[p]);
        assert_rel(
            &format!("d loss / d {p} (channels)"),
            &picked,
            &g.data,
            rel,
            1.0,
        );
    }
}

#[test]
fn bit_resnet_loads_and_matches_flax() {
    let f = fixture(JSON);
    let extra: Extra = serde_json::from_str(JSON).unwrap();
    let dev = Cpu::default();
    let mut model = dev.build_module::<ResNetBackbone, f32>();
    load_as_flax_wrote_it(&mut model, BYTES, &f);

    let x: Tensor<Rank4<2, 3, 32, 32>, f32, Cpu> = dev.tensor(f32s(f.x.as_ref().unwrap()));
    let out = model.forward(x.clone());
    assert_rel(
        "out",
        &out.as_vec(),
        &f.out.as_ref().unwrap().data,
        1e-5,
        1.0,
    );
    let w: Tensor<Rank4<2, 256, 4, 4>, f32, Cpu> = dev.tensor(f32s(f.w.as_ref().unwrap()));
    let loss = (out * w.clone()).sum::<Rank0, _>().array();
    assert!((f64::from(loss) - extra.loss).abs() < 1e-4 * extra.loss.abs().max(1.0));
    let y = model.forward_mut(x.clone().traced(model.alloc_grads()));
    let grads = (y * w.clone()).sum().backward();
    check_grads(&flax_grads(&model, &grads), &f, &extra, 1e-4);
    // A training step: forward_mut, backward, an SGD update.
    let before = model.conv_root.inner.weight.as_vec();
    let mut state = TrainState::create(model, sgd(0.1, None, false)).unwrap();
    let (_, grads) = state
        .value_and_grad(|m, tape| (m.forward_mut(x.clone().put_tape(tape)) * w.clone()).sum())
        .unwrap();
    state.apply_gradients(grads).unwrap();
    assert_ne!(state.params.conv_root.inner.weight.as_vec(), before);
}

#[test]
fn bit_resnet_in_f64_matches_flax_in_f64() {
    let f = fixture(JSON);
    let extra: Extra = serde_json::from_str(JSON).unwrap();
    let dev = Cpu::default();
    let mut model = dev.build_module::<ResNetBackbone, f64>();
    flax::load(&mut model, BYTES).unwrap();
    let x: Tensor<Rank4<2, 3, 32, 32>, f64, Cpu> = dev.tensor(f.x.as_ref().unwrap().data.clone());
    let w: Tensor<Rank4<2, 256, 4, 4>, f64, Cpu> = dev.tensor(f.w.as_ref().unwrap().data.clone());
    let out = model.forward(x.clone());
    assert_rel("out", &out.as_vec(), &extra.out_f64.data, 1e-9, 1.0);
    let grads = (model.forward_mut(x.traced(model.alloc_grads())) * w)
        .sum()
        .backward();
    check_grads(&flax_grads(&model, &grads), &f, &extra, 1e-9);
}
