//! What a checkpoint refuses: extra tensors, NaN/Inf values (on writing and
//! on reading, without ever rotating out a good file), a header without its
//! checksum; and what it guarantees: equal states give equal bytes, the
//! buffer is never empty, a `TrainState` goes through the module path.

use std::path::{Path, PathBuf};

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::prelude::*;
use flaxen::runtime::checkpoint::{Checkpoint, CheckpointError, CheckpointManager};
use flaxen::runtime::data::{ArrayDataset, Loader, LoaderConfig};
use flaxen::runtime::optim::Adam;
use flaxen::runtime::state::{HostTensor, StateDict, StateError, StateMap};

type Mlp = (Linear<2, 4>, ReLU, Linear<4, 3>);
type Built = <Mlp as BuildOnDevice<Cpu, f32>>::Built;

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flaxen-guard-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn loader(dev: &Cpu) -> Loader<Rank1<2>, 2, f32, Cpu> {
    let x = (0..20).map(|v| v as f32).collect();
    let ds = ArrayDataset::new(vec![2], x, (0..10).collect()).unwrap();
    Loader::new(ds, dev, LoaderConfig::new(1)).unwrap()
}

/// One more tensor than the model has.
struct Extra;
impl StateDict<f32> for Extra {
    fn save_state(&self, prefix: &str, out: &mut StateMap<f32>) {
        let t = HostTensor {
            shape: vec![2],
            data: vec![1.0, 2.0],
        };
        out.insert(format!("{prefix}extra.weight"), t);
    }
    fn load_state(&mut self, _: &str, _: &StateMap<f32>) -> Result<(), StateError> {
        Ok(())
    }
}

fn invalid_key(err: &CheckpointError) -> &str {
    match err {
        CheckpointError::Mismatch {
            error: StateError::Invalid { key, .. },
            ..
        } => key,
        other => panic!("expected a tensor the objects lack, got {other:?}"),
    }
}

#[test]
fn an_extra_tensor_is_refused_naming_it() {
    let dev = Cpu::default();
    let model = dev.build_module::<Mlp, f32>();
    // Under the restored part's own prefix.
    let mut ckpt = Checkpoint::new(1);
    ckpt.add_module("params", &model).unwrap();
    ckpt.add("params", &Extra).unwrap();
    let mut back = dev.build_module::<Mlp, f32>();
    let before = back.0.weight.as_vec();
    let err = ckpt
        .restore()
        .module("params", &mut back)
        .apply()
        .unwrap_err();
    assert_eq!(invalid_key(&err), "params.extra.weight");
    assert_eq!(back.0.weight.as_vec(), before, "nothing was loaded");

    // Under a part nobody restores: the same error, and everything is put
    // back (the loader too).
    let mut ckpt = Checkpoint::new(1);
    let mut data = loader(&dev);
    ckpt.add_module("params", &model)
        .unwrap()
        .add("data", &data)
        .unwrap()
        .add("head", &Extra)
        .unwrap();
    data.next_batch().unwrap();
    let state = data.state();
    let err = ckpt
        .restore()
        .module("params", &mut back)
        .part("data", &mut data)
        .apply()
        .unwrap_err();
    assert_eq!(invalid_key(&err), "head.extra.weight");
    assert!(err
        .to_string()
        .contains("none of the objects restored has it"));
    assert_eq!(back.0.weight.as_vec(), before);
    assert_eq!(data.state(), state);
    // Skipping it on purpose is allowed.
    ckpt.restore()
        .module("params", &mut back)
        .part("data", &mut data)
        .skip("head")
        .apply()
        .unwrap();
    assert_eq!(back.0.weight.as_vec(), model.0.weight.as_vec());
}

type State = TrainState<Built, Adam<f64>, f32, Cpu>;

fn train_state(dev: &Cpu) -> State {
    TrainState::create(dev.build_module::<Mlp, f32>(), adam(1e-2)).unwrap()
}

#[test]
fn a_train_state_refuses_an_extra_parameter() {
    // TrainState had its own copy of the module loader, which ignored
    // tensors the model lacks; it now goes through `load_module_state`.
    let dev = Cpu::default();
    let state = train_state(&dev);
    let mut saved = StateMap::new();
    state.save_state("train.", &mut saved);
    saved.insert(
        "train.params.9.weight".into(),
        HostTensor {
            shape: vec![1],
            data: vec![0.0],
        },
    );
    let mut other = train_state(&dev);
    let before = other.params.0.weight.as_vec();
    let err = other.load_state("train.", &saved).unwrap_err();
    assert_eq!(
        err,
        StateError::Invalid {
            key: "train.params.9.weight".into(),
            reason: "is in the checkpoint but not in the model (another architecture?)".into()
        }
    );
    assert_eq!(other.params.0.weight.as_vec(), before);

    // The same through a checkpoint file's restore.
    let mut ckpt = Checkpoint::new(0);
    ckpt.add("train", &state)
        .unwrap()
        .add("train", &Extra)
        .unwrap();
    let err = ckpt
        .restore()
        .part("train", &mut other)
        .apply()
        .unwrap_err();
    assert_eq!(invalid_key(&err), "train.extra.weight");
}

fn with_nan(dev: &Cpu) -> Built {
    let mut model = dev.build_module::<Mlp, f32>();
    let mut b = model.2.bias.as_vec();
    b[2] = f32::NAN;
    model.2.bias.copy_from(&b);
    model
}

#[test]
fn a_non_finite_state_is_never_written_nor_rotates_a_good_one_out() {
    let dev = Cpu::default();
    let dir = tmp_dir("nan-save");
    let manager = CheckpointManager::new(&dir, 1).unwrap();
    let mut good = Checkpoint::new(10);
    good.add_module("params", &dev.build_module::<Mlp, f32>())
        .unwrap();
    let good_path = manager.save(&good).unwrap();
    let good_bytes = std::fs::read(&good_path).unwrap();

    for (step, value) in [(20, f32::NAN), (30, f32::INFINITY), (40, f32::NEG_INFINITY)] {
        let mut model = dev.build_module::<Mlp, f32>();
        let mut w = model.0.weight.as_vec();
        w[5] = value;
        model.0.weight.copy_from(&w);
        let mut bad = Checkpoint::new(step);
        bad.add_module("params", &model).unwrap();
        let err = manager.save(&bad).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::NonFinite { key, index: 5, .. } if key == "params.0.weight"),
            "{err:?}"
        );
        assert!(!manager.path_for(step).exists());
    }
    // keep = 1, yet the good checkpoint is still there, unchanged, alone.
    assert_eq!(manager.list().unwrap(), vec![(10, good_path.clone())]);
    assert_eq!(std::fs::read(&good_path).unwrap(), good_bytes);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
}

#[test]
fn a_non_finite_checkpoint_is_refused_at_load_naming_the_tensor() {
    let dev = Cpu::default();
    let mut ckpt = Checkpoint::new(3);
    ckpt.add_module("params", &with_nan(&dev)).unwrap();
    // Written around `save`'s check, as another tool could.
    let dir = tmp_dir("nan-load");
    let path = dir.join("ckpt-000000000003.safetensors");
    std::fs::write(&path, ckpt.to_bytes().unwrap()).unwrap();
    let err = CheckpointManager::new(&dir, 3)
        .unwrap()
        .restore_latest()
        .unwrap_err();
    assert!(
        matches!(&err, CheckpointError::NonFinite { key, index: 2, .. } if key == "params.2.bias"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(path.to_str().unwrap()) && msg.contains("`params.2.bias`"),
        "{msg}"
    );
}

/// Rewrites the safetensors header of `bytes` with `edit` (same length,
/// padded with spaces, so the data offsets stay valid).
fn edit_header(bytes: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let mut text = header.to_string().into_bytes();
    assert!(text.len() <= n);
    text.resize(n, b' ');
    [&bytes[..8], &text, &bytes[8 + n..]].concat()
}

fn load_err(bytes: &[u8]) -> String {
    Checkpoint::from_bytes(Path::new("ckpt"), bytes)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_checkpoint_without_its_checksum_is_refused() {
    let dev = Cpu::default();
    let mut ckpt = Checkpoint::new(3);
    ckpt.add_module("params", &dev.build_module::<Mlp, f32>())
        .unwrap();
    let bytes = ckpt.to_bytes().unwrap();
    let no_crc = edit_header(&bytes, |h| {
        h["__metadata__"].as_object_mut().unwrap().remove("crc32c");
    });
    let msg = load_err(&no_crc);
    assert!(msg.contains("the header has no `crc32c` entry"), "{msg}");
    // ... with a flipped bit as well (a reported case): still refused.
    let mut flipped = no_crc.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x04;
    assert!(load_err(&flipped).contains("no `crc32c` entry"));
    // No metadata at all, or another format.
    let bare = edit_header(&bytes, |h| {
        h.as_object_mut().unwrap().remove("__metadata__");
    });
    assert!(load_err(&bare).contains("no `format` entry"));
    let other = edit_header(&bytes, |h| h["__metadata__"]["format"] = "pytorch".into());
    assert!(load_err(&other).contains("format is `pytorch`"));
    // The untouched bytes load.
    Checkpoint::from_bytes(Path::new("ckpt"), &bytes).unwrap();
}

#[test]
fn equal_states_give_equal_bytes() {
    // The header used to be written from hash maps, in an order that
    // changed from one map to the next.
    let dev = Cpu::default();
    let model = dev.build_module::<Mlp, f32>();
    let data = loader(&dev);
    let make = || {
        let mut c = Checkpoint::new(7);
        c.add_module("params", &model)
            .unwrap()
            .add("data", &data)
            .unwrap();
        c.to_bytes().unwrap()
    };
    let first = make();
    for _ in 0..16 {
        assert_eq!(make(), first);
    }
    // And they read back to the same checkpoint, whose bytes are the same.
    let back = Checkpoint::from_bytes(Path::new("x"), &first).unwrap();
    assert_eq!(back.to_bytes().unwrap(), first);
}

#[test]
fn an_empty_checkpoint_is_still_a_valid_file() {
    let bytes = Checkpoint::new(5).to_bytes().unwrap();
    assert!(bytes.len() > 8);
    assert_eq!(
        Checkpoint::from_bytes(Path::new("e"), &bytes)
            .unwrap()
            .step(),
        5
    );
}

/// Writes a tensor whose data does not fit its shape.
struct Misshapen;
impl StateDict<f32> for Misshapen {
    fn save_state(&self, prefix: &str, out: &mut StateMap<f32>) {
        let t = HostTensor {
            shape: vec![3],
            data: vec![1.0, 2.0],
        };
        out.insert(format!("{prefix}w"), t);
    }
    fn load_state(&mut self, _: &str, _: &StateMap<f32>) -> Result<(), StateError> {
        Ok(())
    }
}

#[test]
fn a_misshapen_tensor_is_refused_when_added() {
    // It used to be dropped silently from the file (and the checksum then
    // failed on load).
    let err = Checkpoint::new(0).add("opt", &Misshapen).unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Invalid { key, .. } if key == "opt.w"),
        "{err:?}"
    );
}

#[test]
fn rotation_never_deletes_the_file_just_written() {
    let dir = tmp_dir("rotate-older");
    let manager = CheckpointManager::new(&dir, 2).unwrap();
    for step in [40, 50] {
        manager.save(&Checkpoint::new(step)).unwrap();
    }
    let path = manager.save(&Checkpoint::new(10)).unwrap();
    assert!(path.exists());
    let steps: Vec<u64> = manager.list().unwrap().into_iter().map(|p| p.0).collect();
    assert_eq!(steps, vec![10, 40, 50]);
}

#[test]
fn an_io_error_prints_its_cause_once() {
    let err = Checkpoint::load("/nonexistent/flaxen/ckpt.safetensors").unwrap_err();
    assert!(err.to_string().contains("No such file"), "{err}");
    assert!(std::error::Error::source(&err).is_none());
}

/// A counter kept in `f32` by `save_state` (inexact past 2^24) and exactly
/// by `save_counters`.
#[derive(Debug, Default, PartialEq)]
struct Counted(u64);
impl StateDict<f32> for Counted {
    fn save_state(&self, prefix: &str, out: &mut StateMap<f32>) {
        let t = HostTensor {
            shape: vec![],
            data: vec![self.0 as f32],
        };
        out.insert(format!("{prefix}count"), t);
    }
    fn load_state(&mut self, prefix: &str, src: &StateMap<f32>) -> Result<(), StateError> {
        let key = format!("{prefix}count");
        self.0 = src.get(&key).ok_or(StateError::Missing { key })?.data[0] as u64;
        Ok(())
    }
    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        let t = HostTensor {
            shape: vec![],
            data: vec![self.0],
        };
        out.insert(format!("{prefix}count"), t);
    }
    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        let key = format!("{prefix}count");
        self.0 = src.get(&key).ok_or(StateError::Missing { key })?.data[0];
        Ok(())
    }
}

/// The dtype a file's header gives tensor `key`.
fn dtype_in_file(bytes: &[u8], key: &str) -> String {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header[key]["dtype"].as_str().unwrap().to_string()
}

#[test]
fn counters_are_exact_u64_in_the_file() {
    // 2^24 + 1 is not an f32: stored in the state's dtype it came back as
    // 2^24 (in f16, anything past 2048 was off).
    let big = (1u64 << 24) + 1;
    let mut ckpt = Checkpoint::new(0);
    ckpt.add("opt", &Counted(big)).unwrap();
    let bytes = ckpt.to_bytes().unwrap();
    assert_eq!(dtype_in_file(&bytes, "opt.count"), "U64");
    let back = Checkpoint::from_bytes(Path::new("c"), &bytes).unwrap();
    let mut restored = Counted(3);
    back.restore().part("opt", &mut restored).apply().unwrap();
    assert_eq!(restored, Counted(big));

    // A TrainState's step and its optimizer's count are U64 too, and the
    // state resumes with both.
    let dev = Cpu::default();
    let mut state = train_state(&dev);
    let x: Tensor<Rank2<4, 2>, f32, _> = dev.sample_normal();
    for _ in 0..3 {
        let (_, grads) = state
            .value_and_grad(|m, tape| m.forward(x.clone().put_tape(tape)).square().mean())
            .unwrap();
        state.apply_gradients(grads).unwrap();
    }
    let mut ckpt = Checkpoint::new(state.step());
    ckpt.add("train", &state).unwrap();
    let bytes = ckpt.to_bytes().unwrap();
    assert_eq!(dtype_in_file(&bytes, "train.step"), "U64");
    assert_eq!(dtype_in_file(&bytes, "train.opt.count"), "U64");
    assert_eq!(dtype_in_file(&bytes, "train.opt.mu.0.weight"), "F32");
    let mut other = train_state(&dev);
    let step = ckpt.restore().part("train", &mut other).apply().unwrap();
    assert_eq!((step, other.step()), (3, 3));
    assert_eq!(other.params.2.bias.as_vec(), state.params.2.bias.as_vec());
    assert_eq!(other.opt_state.count(), 3);
}

#[test]
fn a_state_step_other_than_the_files_is_refused() {
    let dev = Cpu::default();
    let state = train_state(&dev);
    // The file says step 5, its training state says 0.
    let mut ckpt = Checkpoint::new(5);
    ckpt.add("train", &state).unwrap();
    let mut other = train_state(&dev);
    let err = ckpt
        .restore()
        .part("train", &mut other)
        .apply()
        .unwrap_err();
    assert_eq!(invalid_key(&err), "train.step");
    assert!(
        err.to_string()
            .contains("is 0, but the checkpoint's `step` is 5"),
        "{err}"
    );
}
