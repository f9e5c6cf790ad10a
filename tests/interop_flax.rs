//! Flax checkpoints in and out (`flaxen::interop::flax`) against
//! `tests/fixtures/flax_interop.msgpack`, a small CNN (Conv, BatchNorm,
//! Dense) trained 5 steps in Flax and saved with
//! `flax.serialization.to_bytes`, and its logits on a stored batch
//! (`tests/fixtures/flax_interop.json`); both made by
//! `tests/python/make_flax_interop.py`.

#[path = "common/fixture.rs"]
mod fixture;

use flaxen::interop::flax::{self, FlaxError, SaveOptions};
use flaxen::prelude::*;
use flaxen::runtime::state::HostTensor;

const FIXTURE: &[u8] = include_bytes!("fixtures/flax_interop.msgpack");

/// The fixture's model, as a Flax user's `Cnn` reads in flaxen.
pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 8, 8>) {
        let x = relu(BatchNorm()(Conv(8, (3, 3))(x)));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        // The Flax model transposes to NCHW before its reshape.
        let x = relu(Dense(16)(flatten(x, channels_first = true)));
        Dense(10)(x)
    }
}

type Net = <Cnn as BuildOnDevice<Cpu, f32>>::Built;

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn state(model: &Net) -> StateMap<f32> {
    let mut out = StateMap::new();
    flaxen::runtime::checkpoint::save_module_state(model, "", &mut out);
    out
}

#[test]
fn flax_trained_cnn_gives_flax_logits() {
    let dev = Cpu::default();
    let mut model = dev.build_module::<Cnn, f32>();
    flax::load(&mut model, FIXTURE).unwrap();
    let f: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/flax_interop.json")).unwrap();
    let x: Tensor<Rank4<4, 1, 8, 8>, f32, Cpu> = dev.tensor(floats(&f["x"]));
    let got = model.forward(x).as_vec();
    let want = floats(&f["logits"]);
    fixture::assert_rel("logits vs Flax", &got, &want, 1e-5, 1.0);
}

#[test]
fn round_trip_through_flax_bytes_is_exact() {
    let dev = Cpu::default();
    let mut a = dev.build_module::<Cnn, f32>();
    flax::load(&mut a, FIXTURE).unwrap();
    let bytes = flax::save(&a).unwrap();
    // The saved file holds the fixture's values, bit for bit.
    assert_eq!(
        flax::read_state::<f32>(&bytes).unwrap(),
        flax::read_state::<f32>(FIXTURE).unwrap()
    );
    let mut b = dev.build_module::<Cnn, f32>();
    assert_ne!(state(&a), state(&b));
    flax::load(&mut b, &bytes).unwrap();
    assert_eq!(state(&a), state(&b));
    assert_eq!(flax::save(&b).unwrap(), bytes);
}

/// Loads `bytes` into a fresh model, expecting an error; checks that the
/// model is unchanged and returns the message.
fn load_err(bytes: &[u8]) -> (FlaxError, String) {
    let dev = Cpu::default();
    let mut model = dev.build_module::<Cnn, f32>();
    let before = state(&model);
    let err = flax::load(&mut model, bytes).unwrap_err();
    assert_eq!(
        state(&model),
        before,
        "a failed load left the model changed"
    );
    let msg = err.to_string();
    (err, msg)
}

fn edited(edit: impl FnOnce(&mut StateMap<f32>)) -> Vec<u8> {
    let mut s = flax::read_state::<f32>(FIXTURE).unwrap();
    edit(&mut s);
    flax::write_state(&s, &SaveOptions::new()).unwrap()
}

#[test]
fn truncated_file_is_an_error() {
    let (err, msg) = load_err(&FIXTURE[..FIXTURE.len() - 10]);
    assert!(matches!(err, FlaxError::Msgpack { .. }), "{msg}");
    let (err, msg) = load_err(b"");
    assert!(matches!(err, FlaxError::Msgpack { .. }), "{msg}");
}

#[test]
fn missing_tensor_is_named() {
    let bytes = edited(|s| {
        s.remove("dense_1.bias");
    });
    let (err, msg) = load_err(&bytes);
    assert!(
        matches!(err, FlaxError::Mismatches { total: 1, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("missing: `params/Dense_1/bias` (flaxen `dense_1.bias`)"),
        "{msg}"
    );
    let bytes = edited(|s| {
        s.remove("batch_norm_0.running_var");
    });
    let (_, msg) = load_err(&bytes);
    assert!(msg.contains("batch_stats/BatchNorm_0/var"), "{msg}");
}

#[test]
fn extra_tensor_is_named() {
    let bytes = edited(|s| {
        let t = s["dense_1.bias"].clone();
        s.insert("dense_2.bias".into(), t);
    });
    let (err, msg) = load_err(&bytes);
    assert!(
        matches!(err, FlaxError::Mismatches { total: 1, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("extra: `params/Dense_2/bias` [10] has no place in the model"),
        "{msg}"
    );
}

#[test]
fn wrong_shape_is_named() {
    let bytes = edited(|s| {
        let t = s.get_mut("conv_0.weight").unwrap();
        t.shape = vec![8, 1, 5, 5];
        t.data = vec![0.0; 200];
    });
    let (err, msg) = load_err(&bytes);
    assert!(
        matches!(err, FlaxError::Mismatches { total: 1, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("`conv_0.weight`") && msg.contains("params/Conv_0/kernel"),
        "{msg}"
    );
    assert!(
        msg.contains("[8, 1, 5, 5]") && msg.contains("[8, 1, 3, 3]"),
        "{msg}"
    );
}

#[test]
fn unknown_layers_and_collections_are_named() {
    // A Flax module flaxen has no mapping for.
    let mut s = flax::read_state::<f32>(FIXTURE).unwrap();
    s.insert(
        "instance_norm_0.scale".into(),
        HostTensor {
            shape: vec![1],
            data: vec![1.0],
        },
    );
    let err = flax::write_state(&s, &SaveOptions::new()).unwrap_err();
    assert!(err.to_string().contains("instance_norm_0.scale"), "{err}");
    // Not a tree of arrays: a msgpack integer.
    let (err, msg) = load_err(&[0x2a]);
    assert!(matches!(err, FlaxError::Format { .. }), "{msg}");
}

/// A block with attention, as a user module nested in [`Zoo`].
pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<6, 8>) {
        let y = SelfAttention(num_heads = 2)(LayerNorm()(x));
        Dense(8)(x + y)
    }
}

/// Every other layer kind the mapping knows: Embed, a nested module with
/// LayerNorm and SelfAttention, a GRU.
pub struct Zoo;

#[compact]
impl Zoo {
    fn forward(tokens: Tokens<6>) {
        let x = Embed(20, 8)(tokens);
        let x = Block()(x);
        let x = RNN(GRUCell(features = 8))(x);
        Dense(3)(x)
    }
}

fn zoo_state(model: &<Zoo as BuildOnDevice<Cpu, f32>>::Built) -> StateMap<f32> {
    let mut out = StateMap::new();
    flaxen::runtime::checkpoint::save_module_state(model, "", &mut out);
    out
}

#[test]
fn attention_embed_and_cells_round_trip() {
    let dev = Cpu::default();
    let a = dev.build_module::<Zoo, f32>();
    let keys: Vec<String> = zoo_state(&a).into_keys().collect();
    for (key, path) in [
        ("embed_0.embedding", "params/Embed_0/embedding"),
        (
            "block_0.layer_norm_0.gamma",
            "params/Block_0/LayerNorm_0/scale",
        ),
        (
            "block_0.self_attention_0.query.weight",
            "params/Block_0/SelfAttention_0/query/kernel",
        ),
        ("gru_cell_0.hn.bias", "params/GRUCell_0/hn/bias"),
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} not in {keys:?}");
        assert_eq!(flax::flax_path(key).unwrap(), path);
    }
    // The model knows its heads: `save` splits the kernels by them.
    let bytes = flax::save(&a).unwrap();
    let arrays = flax::read_arrays(&bytes).unwrap();
    assert_eq!(
        arrays["params/Block_0/SelfAttention_0/query/kernel"].shape,
        [8, 2, 4]
    );
    // The name mapping of a bare state cannot know them and asks.
    let err = flax::write_state(&zoo_state(&a), &SaveOptions::new()).unwrap_err();
    assert!(matches!(err, FlaxError::Heads { .. }), "{err}");
    let opts = SaveOptions::new().num_heads("block_0.self_attention_0", 2);
    assert_eq!(flax::write_state(&zoo_state(&a), &opts).unwrap(), bytes);
    let mut b = dev.build_module::<Zoo, f32>();
    assert_ne!(zoo_state(&a), zoo_state(&b));
    flax::load(&mut b, &bytes).unwrap();
    assert_eq!(zoo_state(&a), zoo_state(&b));
}

/// Flaxen key -> Flax path agrees with `tests/python/flax_keys.py`'s
/// `paths` (the `flax_paths` of the compact fixtures) and with the RNN
/// fixture's cell paths.
#[test]
fn flax_paths_match_the_python_twin() {
    let v2: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/flax_compact_v2.json")).unwrap();
    let mut n = 0;
    for model in ["stage", "encoder", "mlp"] {
        for (key, path) in v2[model]["flax_paths"].as_object().unwrap() {
            let got = flax::flax_path(key).unwrap();
            let (_, rest) = got.split_once('/').unwrap();
            assert_eq!(rest, path.as_str().unwrap(), "{model}: {key}");
            n += 1;
        }
    }
    let rnn: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/flax_rnn.json")).unwrap();
    for case in rnn["cases"].as_array().unwrap() {
        for (key, path) in case["flax_paths"].as_object().unwrap() {
            let path = path.as_str().unwrap();
            let (cell, _) = path.split_once('/').unwrap();
            let prefix = match cell {
                "LSTMCell_0" => "lstm_cell_0",
                "GRUCell_0" => "gru_cell_0",
                "SimpleCell_0" => "simple_cell_0",
                other => panic!("cell {other}"),
            };
            let got = flax::flax_path(&format!("{prefix}.{key}")).unwrap();
            assert_eq!(got, format!("params/{path}"));
            n += 1;
        }
    }
    assert!(n > 50, "{n} paths checked");
}

/// The fixture's model trained in Flax on the digits' training split
/// classifies the test split as it does in Flax, digit for digit.
#[test]
fn digits_checkpoint_scores_as_in_flax() {
    let f: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/flax_interop_digits.json")).unwrap();
    let (_, test) = flaxen::runtime::data::digits::load().unwrap();
    let labels: Vec<usize> = f["test_labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(test.labels(), &labels[..], "the Python split is flaxen's");

    let dev = Cpu::default();
    let mut model = dev.build_module::<Cnn, f32>();
    flax::load(
        &mut model,
        include_bytes!("fixtures/flax_interop_digits.msgpack"),
    )
    .unwrap();
    let n = labels.len();
    let x = dev.tensor_from_vec(
        test.features().to_vec(),
        (n, Const::<1>, Const::<8>, Const::<8>),
    );
    let logits = model.forward(x).as_vec();
    let predicted: Vec<usize> = logits
        .chunks(10)
        .map(|row| (0..10).fold(0, |b, i| if row[i] > row[b] { i } else { b }))
        .collect();
    // Digit for digit, not only how many.
    let flax_predicted: Vec<usize> = f["test_predictions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(predicted, flax_predicted);
    let correct = predicted
        .iter()
        .zip(&labels)
        .filter(|(p, y)| p == y)
        .count();
    assert_eq!(correct as u64, f["test_correct"].as_u64().unwrap());
    assert!(correct * 10 > n * 9, "{correct}/{n}: trained, not chance");
}

/// An f64 model loads Flax's float32 values exactly and saves float64.
#[test]
fn f64_model_widens_and_saves_float64() {
    let dev = Cpu::default();
    let mut m = dev.build_module::<Cnn, f64>();
    flax::load(&mut m, FIXTURE).unwrap();
    let mut got = StateMap::<f64>::new();
    flaxen::runtime::checkpoint::save_module_state(&m, "", &mut got);
    let want = flax::read_state::<f32>(FIXTURE).unwrap();
    for (k, t) in &want {
        let wide: Vec<f64> = t.data.iter().map(|&v| v as f64).collect();
        assert_eq!(got[k].data, wide, "{k}");
    }
    let bytes = flax::save(&m).unwrap();
    assert!(bytes.windows(7).any(|w| w == b"float64"));
    assert!(!bytes.windows(7).any(|w| w == b"float32"));
    assert_eq!(flax::read_state::<f64>(&bytes).unwrap(), got);
}
