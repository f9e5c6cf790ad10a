//! Python's `safetensors` reads flaxen checkpoints. Skipped (with a note on
//! stderr) where `python3` with `safetensors` and `numpy` is not installed.

use std::process::Command;

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::prelude::*;
use flaxen::runtime::checkpoint::Checkpoint;
use flaxen::runtime::data::{digits, Loader, LoaderConfig};

#[test]
fn python_safetensors_reads_a_checkpoint() {
    let probe = Command::new("python3")
        .args(["-c", "import safetensors, numpy"])
        .output();
    if !matches!(&probe, Ok(o) if o.status.success()) {
        // CI installs the readers and sets this, so there the check cannot
        // silently pass.
        assert!(
            std::env::var_os("FLAXEN_REQUIRE_PYTHON_CHECKS").is_none(),
            "python3 with safetensors and numpy is not installed"
        );
        eprintln!("skipped: python3 with safetensors and numpy is not installed");
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

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/read_checkpoint.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
