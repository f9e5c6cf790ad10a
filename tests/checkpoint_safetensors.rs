//! Plain safetensors files (dfdx's keys) into `#[compact]` models: flaxen's
//! `load_safetensors` reads tensors only, so a setting the file lacks (a
//! Flax LayerNorm's epsilon of 1e-6) is never reset to dfdx's default.

use flaxen::prelude::*;
use flaxen::runtime::checkpoint::{load_safetensors, CheckpointError};

pub struct Normed;

#[compact]
impl Normed {
    fn forward(x: Input<4>) {
        Dense(2)(LayerNorm()(x))
    }
}

/// A safetensors file of f32 tensors only, as a tool other than dfdx
/// writes it.
fn tensors_only(tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (key, shape, values) in tensors {
        let start = data.len();
        for v in values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        header.insert(
            key.to_string(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut header = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(data);
    out
}

#[test]
fn a_setting_the_file_lacks_stays_the_models() {
    let dev = Cpu::default();
    let file = tensors_only(&[
        ("layer_norm_0.gamma", vec![4], vec![1.0, 2.0, 3.0, 4.0]),
        ("layer_norm_0.beta", vec![4], vec![0.5; 4]),
        ("dense_0.weight", vec![2, 4], vec![0.25; 8]),
        ("dense_0.bias", vec![2], vec![-1.0, 1.0]),
    ]);
    let path = std::env::temp_dir().join(format!("flaxen-st-{}.safetensors", std::process::id()));
    std::fs::write(&path, &file).unwrap();

    let mut m = dev.build_module::<Normed, f32>();
    assert_eq!(m.layer_norm_0.epsilon, 1e-6); // Flax's default
    load_safetensors(&mut m, &path).unwrap();
    assert_eq!(m.layer_norm_0.gamma.array(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(m.dense_0.bias.array(), [-1.0, 1.0]);
    assert_eq!(m.layer_norm_0.epsilon, 1e-6);

    // A setting changed after building stays too.
    m.layer_norm_0.epsilon = 1e-3;
    load_safetensors(&mut m, &path).unwrap();
    assert_eq!(m.layer_norm_0.epsilon, 1e-3);

    // The hazard it avoids: dfdx's own loader resets what the file lacks
    // to the type's default.
    let mut d = dev.build_module::<Normed, f32>();
    d.layer_norm_0.epsilon = 1e-3;
    d.load_safetensors(&path).unwrap();
    assert_eq!(d.layer_norm_0.epsilon, 1e-6);

    // A file of another model is refused, naming the tensor; the model
    // keeps its values.
    let short = tensors_only(&[("dense_0.bias", vec![2], vec![0.0, 0.0])]);
    std::fs::write(&path, &short).unwrap();
    let err = load_safetensors(&mut m, &path).unwrap_err();
    assert!(matches!(err, CheckpointError::Mismatch { .. }), "{err}");
    assert!(err.to_string().contains("layer_norm_0"), "{err}");
    assert_eq!(m.dense_0.bias.array(), [-1.0, 1.0]);
    std::fs::remove_file(&path).unwrap();
}
