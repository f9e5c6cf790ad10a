//! Python's `safetensors` reads flaxen checkpoints. Skipped (with a note on
//! stderr) where `python3` with `safetensors` and `numpy` is not installed.

#[path = "common/python.rs"]
mod python;

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::prelude::*;
use flaxen::runtime::checkpoint::Checkpoint;
use flaxen::runtime::data::{digits, Loader, LoaderConfig};

#[test]
fn python_safetensors_reads_a_checkpoint() {
    if !python::has_modules("safetensors, numpy") {
        return;
    }
    let dev = Cpu::default();
    let model = dev.build_module::<(Linear<64, 10>, ReLU, Linear<10, 3>), f32>();
    let (train, _) = digits::load().unwrap();
    let mut loader: Loader<Rank3<1, 8, 8>, 32, f32, Cpu> =
        Loader::new(train, &dev, LoaderConfig::new(3)).unwrap();
    loader.next_batch().unwrap();
    let mut ckpt = Checkpoint::new(77);
    ckpt.add_module("params", &model)
        .unwrap()
        .add("data", &loader)
        .unwrap();
    let path = std::env::temp_dir().join(format!("flaxen-py-{}.safetensors", std::process::id()));
    ckpt.save(&path).unwrap();

    let summary = python::read_with("read_checkpoint.py", &path);
    assert_eq!(summary["step"], 77);
    assert_eq!(summary["metadata"]["format"], "flaxen-checkpoint");
    let t = &summary["tensors"];
    assert_eq!(t["params.0.weight"]["dtype"], "float32");
    assert_eq!(t["params.0.weight"]["shape"], serde_json::json!([10, 64]));
    let sum: f64 = model.0.weight.as_vec().iter().map(|&v| v as f64).sum();
    assert!((t["params.0.weight"]["sum"].as_f64().unwrap() - sum).abs() < 1e-9);
    assert_eq!(t["data.position"]["dtype"], "uint64");
    assert_eq!(t["data.position"]["sum"], 32.0);
    assert_eq!(t["data.seed"]["sum"], 3.0);
    let _ = std::fs::remove_file(path);
}
