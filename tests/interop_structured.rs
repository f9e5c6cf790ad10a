//! Flax checkpoints mapped from the model's own structure: Flax models
//! written as Flax users write them (NHWC flatten, explicit names, user
//! module types, GroupNorm / RMSNorm / ConvTranspose / cross-attention, a
//! named RNN, a boxed kernel), saved by `flax.serialization.to_bytes` with
//! every parameter perturbed, loaded into their `#[compact]` ports; outputs
//! and gradients against Flax's, and saving back against the file.
//! Fixtures: `tests/python/make_flax_structured.py`.
//!
//! Tolerances (f32, `|got - want| <= rel * max(|want|, 1)`): outputs 1e-5,
//! gradients 1e-4, a save of a loaded file exact.

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/flax_files.rs"]
mod flax_files;

use fixture::assert_rel;
use flax_files::{assert_grads, f32s, fixture, flax_grads, load_as_flax_wrote_it, rows_of};
use flaxen::interop::flax::{self, FlaxError};
use flaxen::prelude::*;

/// The seed CNN, NCHW, as the Flax model (NHWC) reads: its `flatten` feeds
/// `Dense_0`, whose kernel rows Flax orders (h, w, c).
pub struct SeedCnn;

#[compact]
impl SeedCnn {
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

/// Flax's `ResUnit`: layers named `conv1`, `gn1`.
pub struct ResUnit;

#[compact]
impl ResUnit {
    fn forward(x: Input<8, 8, 8>, features: Param<8>) {
        let y = Conv(features, (3, 3), use_bias = false, name = "conv1")(x);
        let y = GroupNorm(num_groups = 4, name = "gn1")(y);
        relu(x + y)
    }
}

/// Flax's `Named`: explicitly named layers, a user module auto-named
/// `ResUnit_0` and one named `block2`, `ConvTranspose_0`, a flatten.
pub struct Named;

#[compact]
impl Named {
    fn forward(x: Input<3, 8, 8>) {
        let x = Conv(8, (3, 3), name = "stem")(x);
        let x = ResUnit(8)(x);
        let x = ResUnit(8, name = "block2")(x);
        let x = ConvTranspose(4, (2, 2), strides = (2, 2))(x);
        let x = avg_pool(x, (4, 4), strides = (4, 4));
        let x = flatten(x);
        let x = Dense(32, name = "fc")(x);
        let x = RMSNorm(name = "pre_norm")(x);
        let x = LayerNorm(name = "encoder_norm")(x);
        Dense(10, name = "head")(x)
    }
}

/// Flax's `CrossBlock` over `(targets, memory)`.
pub struct CrossBlock;

#[compact]
impl CrossBlock {
    fn forward(x: Input<6, 16>, mem: Input<5, 16>) {
        let h = LayerNorm()(x);
        let h = MultiHeadDotProductAttention(num_heads = 2)(h, mem);
        let x = x + h;
        let h = Dense(32)(LayerNorm()(x));
        x + Dense(16)(gelu(h))
    }
}

/// Flax's `EncDec`: the named RNN's cell is Flax's `LSTMCell_0`.
pub struct EncDec;

#[compact]
impl EncDec {
    fn forward(src: Input<5, 16>, tgt: Input<6, 16>) {
        let mem = relu(Dense(16)(src));
        let mem = RNN(LSTMCell(16), name = "encoder")(mem);
        let y = CrossBlock()(tgt, mem);
        Dense(3)(y[0])
    }
}

/// A user block whose type name holds an acronym.
#[allow(clippy::upper_case_acronyms)]
pub struct DecoderLSTMCell;

#[compact]
impl DecoderLSTMCell {
    fn forward(x: Input<12>) {
        tanh(Dense(12)(x))
    }
}

#[allow(clippy::upper_case_acronyms)]
pub struct MLPHead;

#[compact]
impl MLPHead {
    fn forward(x: Input<12>) {
        Dense(4)(x)
    }
}

pub struct Top;

#[compact]
impl Top {
    fn forward(x: Input<12>) {
        let x = DecoderLSTMCell()(x);
        let x = DecoderLSTMCell()(x);
        MLPHead()(x)
    }
}

#[test]
fn seed_cnn_flattened_nhwc_gives_flax_logits_and_gradients() {
    let bytes = include_bytes!("fixtures/flax_seed_nhwc.msgpack");
    let f = fixture(include_str!("fixtures/flax_seed_nhwc.json"));
    let dev = Cpu::default();
    let mut model = dev.build_module::<SeedCnn, f32>();
    load_as_flax_wrote_it(&mut model, bytes, &f);
    let x: Tensor<Rank4<4, 1, 28, 28>, f32, Cpu> = dev.tensor(f32s(f.x.as_ref().unwrap()));
    let logits = model.forward(x.clone());
    assert_rel(
        "logits",
        &logits.as_vec(),
        &f.logits.as_ref().unwrap().data,
        1e-5,
        1.0,
    );
    let mut want_class = 0;
    let mut got_class = 0;
    for (g, w) in logits
        .as_vec()
        .chunks(10)
        .zip(f.logits.as_ref().unwrap().data.chunks(10))
    {
        let argmax = |v: Vec<f64>| (0..10).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
        got_class += argmax(g.iter().map(|v| *v as f64).collect());
        want_class += argmax(w.to_vec());
    }
    assert_eq!(got_class, want_class);

    // The loss's gradients: every one Flax's, Dense_0's kernel on the
    // rows the fixture keeps (they pin the flatten order backwards too).
    let labels: Tensor<Rank1<4>, usize, Cpu> =
        dev.tensor([f.labels[0], f.labels[1], f.labels[2], f.labels[3]]);
    let y = model.forward(x.traced(model.alloc_grads()));
    let loss = softmax_cross_entropy_with_integer_labels(y, labels).mean();
    let grads = loss.backward();
    let got = flax_grads(&model, &grads);
    assert_grads(&got, &f.grads, 1e-4);
    let picked = rows_of(&got["params/Dense_0/kernel"], 256, &f.kernel_grad_rows);
    let want = &f.kernel_grad.as_ref().unwrap().data;
    assert_rel(
        "d loss / d params/Dense_0/kernel rows",
        &picked,
        want,
        1e-4,
        1.0,
    );
}

#[test]
fn named_layers_user_blocks_and_boxed_leaves_load_as_flax_wrote_them() {
    let bytes = include_bytes!("fixtures/flax_named.msgpack");
    let f = fixture(include_str!("fixtures/flax_named.json"));
    let dev = Cpu::default();
    let mut model = dev.build_module::<Named, f32>();
    load_as_flax_wrote_it(&mut model, bytes, &f);
    let x: Tensor<Rank4<3, 3, 8, 8>, f32, Cpu> = dev.tensor(f32s(f.x.as_ref().unwrap()));
    let out = model.forward(x.clone());
    assert_rel(
        "out",
        &out.as_vec(),
        &f.out.as_ref().unwrap().data,
        1e-5,
        1.0,
    );

    let w: Tensor<Rank2<3, 10>, f32, Cpu> = dev.tensor(f32s(f.w.as_ref().unwrap()));
    let y = model.forward_mut(x.traced(model.alloc_grads()));
    let grads = (y * w).sum().backward();
    assert_grads(&flax_grads(&model, &grads), &f.grads, 1e-4);
}

#[test]
fn encoder_decoder_gradients_reach_the_encoder_as_in_flax() {
    let bytes = include_bytes!("fixtures/flax_encdec.msgpack");
    let f = fixture(include_str!("fixtures/flax_encdec.json"));
    let dev = Cpu::default();
    let mut model = dev.build_module::<EncDec, f32>();
    load_as_flax_wrote_it(&mut model, bytes, &f);
    let src: Tensor<Rank3<2, 5, 16>, f32, Cpu> = dev.tensor(f32s(f.src.as_ref().unwrap()));
    let tgt: Tensor<Rank3<2, 6, 16>, f32, Cpu> = dev.tensor(f32s(f.tgt.as_ref().unwrap()));
    let out = model.forward((src.clone(), tgt.clone()));
    assert_rel(
        "out",
        &out.as_vec(),
        &f.out.as_ref().unwrap().data,
        1e-5,
        1.0,
    );

    // Both inputs traced: the parameters' and the inputs' gradients.
    let w: Tensor<Rank2<2, 3>, f32, Cpu> = dev.tensor(f32s(f.w.as_ref().unwrap()));
    let y = model.forward_mut((src.clone().leaky_traced(), tgt.clone().leaky_traced()));
    let grads = (y * w).sum().backward();
    assert_grads(&flax_grads(&model, &grads), &f.grads, 1e-4);
    assert_rel(
        "d loss / d src",
        &grads.get(&src).as_vec(),
        &f.grad_src.as_ref().unwrap().data,
        1e-4,
        1.0,
    );
    assert_rel(
        "d loss / d tgt",
        &grads.get(&tgt).as_vec(),
        &f.grad_tgt.as_ref().unwrap().data,
        1e-4,
        1.0,
    );
}

#[test]
fn user_type_names_are_flax_names_verbatim() {
    let bytes = include_bytes!("fixtures/flax_user_names.msgpack");
    let f = fixture(include_str!("fixtures/flax_user_names.json"));
    let dev = Cpu::default();
    let mut model = dev.build_module::<Top, f32>();
    load_as_flax_wrote_it(&mut model, bytes, &f);
    let x: Tensor<Rank2<3, 12>, f32, Cpu> = dev.tensor(f32s(f.x.as_ref().unwrap()));
    assert_rel(
        "out",
        &model.forward(x).as_vec(),
        &f.out.as_ref().unwrap().data,
        1e-5,
        1.0,
    );
    // Saving writes `DecoderLSTMCell_0`, not a re-cased `DecoderLstmCell_0`.
}

#[test]
fn one_error_lists_every_missing_extra_and_misshaped_tensor() {
    let dev = Cpu::default();
    // The seed CNN's file into the named model: nothing fits.
    let mut model = dev.build_module::<Named, f32>();
    let before = model.fc.weight.as_vec();
    let err = flax::load(
        &mut model,
        include_bytes!("fixtures/flax_seed_nhwc.msgpack"),
    )
    .unwrap_err();
    let FlaxError::Mismatches { problems, total } = &err else {
        panic!("{err}")
    };
    assert_eq!(*total, 17 + 8, "{err}");
    let text = err.to_string();
    for needle in [
        "missing: `params/stem/kernel` (flaxen `stem.weight`)",
        "missing: `params/ResUnit_0/gn1/scale` (flaxen `res_unit_0.gn1.scale`)",
        "missing: `params/head/kernel` (flaxen `head.weight`)",
        "extra: `params/Conv_1/kernel` [3, 3, 32, 64] has no place in the model",
    ] {
        assert!(text.contains(needle), "`{needle}` not in:\n{text}");
    }
    assert_eq!(problems.len(), *total);
    assert_eq!(
        model.fc.weight.as_vec(),
        before,
        "a failed load changed the model"
    );

    // A layer of another size is named with both shapes.
    let mut narrow = dev.build_module::<SeedNarrow, f32>();
    let err = flax::load(
        &mut narrow,
        include_bytes!("fixtures/flax_seed_nhwc.msgpack"),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("the Flax checkpoint does not fit the model: 3 problem(s):\n  "),
        "{text}"
    );
    assert!(
        text.contains("shape: `params/Dense_0/kernel` is [3136, 256] in the file ([256, 3136] in flaxen's layout), but flaxen `dense_0.weight` is [128, 3136]"),
        "{text}"
    );
}

/// The seed CNN with a narrower hidden layer.
pub struct SeedNarrow;

#[compact]
impl SeedNarrow {
    fn forward(x: Input<1, 28, 28>) {
        let x = relu(Conv(32, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = relu(Conv(64, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = relu(Dense(128)(flatten(x)));
        Dense(10)(x)
    }
}

/// Flax's `nn.Dense(5)` on an NHWC map acts on its channels: in flaxen,
/// `Dense(5, axis = -3)` on the NCHW map (a 1x1 convolution whose
/// checkpoint kernel is Flax's `(in, out)`).
pub struct DenseChannels;

#[compact]
impl DenseChannels {
    fn forward(x: Input<3, 6, 6>) {
        let x = relu(Conv(6, (3, 3))(x));
        let x = relu(Dense(5, axis = -3)(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = flatten(x);
        Dense(3)(x)
    }
}

#[test]
fn dense_on_the_channels_of_a_map_is_flaxs_dense_on_nhwc() {
    let bytes = include_bytes!("fixtures/flax_dense_channels.msgpack");
    let f = fixture(include_str!("fixtures/flax_dense_channels.json"));
    let dev = Cpu::default();
    let mut model = dev.build_module::<DenseChannels, f32>();
    load_as_flax_wrote_it(&mut model, bytes, &f);
    let x: Tensor<Rank4<2, 3, 6, 6>, f32, Cpu> = dev.tensor(f32s(f.x.as_ref().unwrap()));
    let out = model.forward(x.clone());
    assert_rel(
        "out",
        &out.as_vec(),
        &f.out.as_ref().unwrap().data,
        1e-5,
        1.0,
    );
    let w: Tensor<Rank2<2, 3>, f32, Cpu> = dev.tensor(f32s(f.w.as_ref().unwrap()));
    let y = model.forward_mut(x.traced(model.alloc_grads()));
    let grads = (y * w).sum().backward();
    assert_grads(&flax_grads(&model, &grads), &f.grads, 1e-4);
}
