//! Checkpoint files: round trip, rotation, and the three ways a file can be
//! wrong (truncated, corrupt, another architecture), each leaving the live
//! state untouched.

use std::path::PathBuf;

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::prelude::*;
use flaxen::runtime::checkpoint::{Checkpoint, CheckpointError, CheckpointManager};
use flaxen::runtime::data::{ArrayDataset, Loader, LoaderConfig};
use flaxen::runtime::state::{HostTensor, StateDict, StateError, StateMap};

type Mlp = (Linear<2, 4>, ReLU, Linear<4, 3>);
type Wide = (Linear<2, 5>, ReLU, Linear<5, 3>);
type Built = <Mlp as BuildOnDevice<Cpu, f32>>::Built;

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flaxen-ckpt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn loader(dev: &Cpu, seed: u64) -> Loader<Rank1<2>, 2, f32, Cpu> {
    let x = (0..20).map(|v| v as f32).collect();
    let ds = ArrayDataset::new(vec![2], x, (0..10).collect()).unwrap();
    Loader::new(ds, dev, LoaderConfig::new(seed)).unwrap()
}

/// A stand-in for an optimizer state: one f32 tensor and a u64 counter kept
/// as a second part.
#[derive(Debug, Clone, PartialEq)]
struct Moments(Vec<f32>);
impl StateDict<f32> for Moments {
    fn save_state(&self, prefix: &str, out: &mut StateMap<f32>) {
        let t = HostTensor {
            shape: vec![self.0.len()],
            data: self.0.clone(),
        };
        out.insert(format!("{prefix}mu"), t);
    }
    fn load_state(&mut self, prefix: &str, src: &StateMap<f32>) -> Result<(), StateError> {
        let key = format!("{prefix}mu");
        let t = src.get(&key).ok_or(StateError::Missing { key })?;
        self.0 = t.data.clone();
        Ok(())
    }
}

fn weights(m: &Built) -> Vec<Vec<f32>> {
    vec![
        m.0.weight.as_vec(),
        m.0.bias.as_vec(),
        m.2.weight.as_vec(),
        m.2.bias.as_vec(),
    ]
}

fn full_checkpoint(
    dev: &Cpu,
    step: u64,
) -> (Checkpoint, Built, Moments, Loader<Rank1<2>, 2, f32, Cpu>) {
    let model = dev.build_module::<Mlp, f32>();
    let opt = Moments(vec![1.0, 2.0, 3.0]);
    let mut data = loader(dev, 5);
    for _ in 0..7 {
        data.next_batch().unwrap();
    }
    let mut ckpt = Checkpoint::new(step);
    ckpt.add_module("params", &model)
        .unwrap()
        .add("opt", &opt)
        .unwrap()
        .add("data", &data)
        .unwrap();
    (ckpt, model, opt, data)
}

#[test]
fn round_trip_through_the_manager() {
    let dev = Cpu::default();
    let (ckpt, model, opt, data) = full_checkpoint(&dev, 123);
    let keys: Vec<&str> = ckpt.keys().collect();
    assert!(keys.contains(&"params.0.weight") && keys.contains(&"params.2.bias"));
    assert!(keys.contains(&"opt.mu") && keys.contains(&"data.position"));

    let manager = CheckpointManager::new(tmp_dir("roundtrip"), 3).unwrap();
    let path = manager.save(&ckpt).unwrap();
    assert!(path.ends_with("ckpt-000000000123.safetensors"));

    let mut model2 = dev.build_module::<Mlp, f32>();
    let mut opt2 = Moments(vec![0.0; 3]);
    let mut data2 = loader(&dev, 99);
    let restored = manager.restore_latest().unwrap().unwrap();
    assert_eq!(restored.path(), path);
    let step = restored
        .restore()
        .module("params", &mut model2)
        .part("opt", &mut opt2)
        .part("data", &mut data2)
        .apply()
        .unwrap();
    assert_eq!(step, 123);
    assert_eq!(weights(&model), weights(&model2));
    assert_eq!(opt, opt2);
    assert_eq!(data.state(), data2.state());
}

#[test]
fn rotation_keeps_the_newest_n() {
    let dir = tmp_dir("rotate");
    let manager = CheckpointManager::new(&dir, 2).unwrap();
    assert!(manager.restore_latest().unwrap().is_none());
    for step in [10, 20, 5, 30, 40] {
        manager.save(&Checkpoint::new(step)).unwrap();
    }
    let steps: Vec<u64> = manager
        .list()
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(steps, vec![30, 40]);
    assert_eq!(manager.restore_latest().unwrap().unwrap().step(), 40);
    // Nothing else is left in the directory (no temporary files).
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);

    let all = CheckpointManager::new(tmp_dir("keepall"), 0).unwrap();
    for step in 0..4 {
        all.save(&Checkpoint::new(step)).unwrap();
    }
    assert_eq!(all.list().unwrap().len(), 4);
}

/// Restoring `bytes` must fail and leave a model, an optimizer state and a
/// loader exactly as they were.
fn restore_fails_untouched(bytes: &[u8], name: &str) -> CheckpointError {
    let dev = Cpu::default();
    let dir = tmp_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt-000000000001.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let mut model = dev.build_module::<Mlp, f32>();
    let mut opt = Moments(vec![9.0; 3]);
    let mut data = loader(&dev, 1);
    data.next_batch().unwrap();
    let (w, o, d) = (weights(&model), opt.clone(), data.state());
    let manager = CheckpointManager::new(&dir, 3).unwrap();
    let err = match manager.restore_latest() {
        Err(e) => e,
        Ok(ckpt) => ckpt
            .unwrap()
            .restore()
            .part("data", &mut data)
            .part("opt", &mut opt)
            .module("params", &mut model)
            .apply()
            .unwrap_err(),
    };
    assert_eq!(weights(&model), w);
    assert_eq!(opt, o);
    assert_eq!(data.state(), d);
    let msg = err.to_string();
    assert!(
        msg.contains(path.to_str().unwrap()),
        "names the file: {msg}"
    );
    err
}

#[test]
fn truncated_file_is_refused() {
    let dev = Cpu::default();
    let bytes = full_checkpoint(&dev, 1).0.to_bytes().unwrap();
    for cut in [bytes.len() - 1, bytes.len() / 2, 20, 3] {
        let err = restore_fails_untouched(&bytes[..cut], &format!("trunc{cut}"));
        assert!(matches!(err, CheckpointError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("truncated or corrupt"), "{err}");
    }
}

#[test]
fn corrupt_file_is_refused() {
    let dev = Cpu::default();
    let bytes = full_checkpoint(&dev, 1).0.to_bytes().unwrap();
    // A flipped bit in the last tensor's data: the header still parses.
    let mut flipped = bytes.clone();
    let n = flipped.len();
    flipped[n - 3] ^= 0x10;
    let err = restore_fails_untouched(&flipped, "flip");
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    // Garbage in the JSON header.
    let mut garbled = bytes.clone();
    garbled[10] = b'#';
    let err = restore_fails_untouched(&garbled, "garble");
    assert!(matches!(err, CheckpointError::Corrupt { .. }), "{err:?}");
    // Not a safetensors file at all.
    let err = restore_fails_untouched(b"hello, world, this is not a checkpoint", "text");
    assert!(matches!(err, CheckpointError::Corrupt { .. }), "{err:?}");
}

#[test]
fn another_architecture_names_tensor_and_shapes() {
    let dev = Cpu::default();
    let wide = dev.build_module::<Wide, f32>();
    let mut ckpt = Checkpoint::new(1);
    ckpt.add_module("params", &wide).unwrap();
    ckpt.add("opt", &Moments(vec![0.0; 3])).unwrap();
    ckpt.add("data", &loader(&dev, 1)).unwrap();
    let err = restore_fails_untouched(&ckpt.to_bytes().unwrap(), "arch");
    match &err {
        CheckpointError::Mismatch {
            error:
                StateError::Shape {
                    key,
                    expected,
                    found,
                },
            ..
        } => {
            assert_eq!(key, "params.0.bias");
            assert_eq!(
                (expected.as_slice(), found.as_slice()),
                (&[4][..], &[5][..])
            );
        }
        other => panic!("expected a shape mismatch, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("`params.0.bias` has shape [5] in the checkpoint, but the model expects [4]"),
        "{msg}"
    );
}

#[test]
fn missing_tensor_and_wrong_dtype_are_refused() {
    let dev = Cpu::default();
    let model = dev.build_module::<Mlp, f32>();
    let mut ckpt = Checkpoint::new(1);
    ckpt.add_module("params", &model).unwrap();
    ckpt.add("data", &loader(&dev, 1)).unwrap();
    // No `opt` part at all.
    let err = restore_fails_untouched(&ckpt.to_bytes().unwrap(), "missing");
    assert!(
        err.to_string().contains("tensor `opt.mu` is missing"),
        "{err}"
    );

    let model64 = dev.build_module::<Mlp, f64>();
    let mut ckpt = Checkpoint::new(1);
    ckpt.add_module("params", &model64).unwrap();
    ckpt.add("opt", &Moments(vec![0.0; 3])).unwrap();
    ckpt.add("data", &loader(&dev, 1)).unwrap();
    let err = restore_fails_untouched(&ckpt.to_bytes().unwrap(), "dtype");
    assert!(
        err.to_string()
            .contains("is F64 in the checkpoint, but the model expects F32"),
        "{err}"
    );
}

#[test]
fn a_late_failure_rolls_back_earlier_parts() {
    let dev = Cpu::default();
    // Parameters fit, but the data order was saved for another dataset size:
    // the loader refuses only when it loads, after the parameters were loaded.
    let (ckpt, _, _, _) = full_checkpoint(&dev, 3);
    let mut model = dev.build_module::<Mlp, f32>();
    let before = weights(&model);
    let x = (0..24).map(|v| v as f32).collect();
    let ds = ArrayDataset::new(vec![2], x, (0..12).collect()).unwrap();
    let mut other: Loader<Rank1<2>, 2, f32, Cpu> =
        Loader::new(ds, &dev, LoaderConfig::new(0)).unwrap();
    let mut opt = Moments(vec![0.0; 3]);
    let err = ckpt
        .restore()
        .module("params", &mut model)
        .part("opt", &mut opt)
        .part("data", &mut other)
        .apply()
        .unwrap_err();
    assert!(err.to_string().contains("dataset_len"), "{err}");
    assert_eq!(weights(&model), before, "params were put back");
    assert_eq!(opt, Moments(vec![0.0; 3]), "opt was put back");
}

#[test]
fn duplicate_keys_are_refused() {
    let mut ckpt = Checkpoint::new(0);
    ckpt.add("opt", &Moments(vec![1.0])).unwrap();
    let err = ckpt.add("opt", &Moments(vec![1.0])).unwrap_err();
    assert!(matches!(err, CheckpointError::Duplicate { .. }));
}

/// A state that prefixes its own keys, saved and restored with name `""`
/// next to a u64 part.
struct Whole(Moments, Moments);
impl StateDict<f32> for Whole {
    fn save_state(&self, prefix: &str, out: &mut StateMap<f32>) {
        self.0.save_state(&format!("{prefix}a."), out);
        self.1.save_state(&format!("{prefix}b."), out);
    }
    fn load_state(&mut self, prefix: &str, src: &StateMap<f32>) -> Result<(), StateError> {
        let (mut a, mut b) = (self.0.clone(), self.1.clone());
        a.load_state(&format!("{prefix}a."), src)?;
        b.load_state(&format!("{prefix}b."), src)?;
        (self.0, self.1) = (a, b);
        Ok(())
    }
}

#[test]
fn an_unnamed_part_keeps_its_own_keys() {
    let dev = Cpu::default();
    let mut ckpt = Checkpoint::new(2);
    let whole = Whole(Moments(vec![1.0]), Moments(vec![2.0, 3.0]));
    ckpt.add("", &whole)
        .unwrap()
        .add("data", &loader(&dev, 1))
        .unwrap();
    let keys: Vec<&str> = ckpt.keys().collect();
    assert_eq!(keys[..2], ["a.mu", "b.mu"]);
    let mut back = Whole(Moments(vec![0.0]), Moments(vec![0.0; 2]));
    let mut data = loader(&dev, 3);
    ckpt.restore()
        .part("", &mut back)
        .part("data", &mut data)
        .apply()
        .unwrap();
    assert_eq!((back.0, back.1), (whole.0, whole.1));
    assert!(Checkpoint::new(0)
        .add("", &Whole(Moments(vec![]), Moments(vec![])))
        .is_ok());
}
