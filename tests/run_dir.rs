//! A run directory across crashes and concurrent runs: one lock holder at a
//! time, stale temporary files removed, metrics not repeated after a resume.

use std::path::PathBuf;

use flaxen::runtime::checkpoint::{Checkpoint, CheckpointManager};
use flaxen::runtime::logging::{JsonlWriter, MetricsLogger};
use flaxen::runtime::run_lock::{RunLock, RunLockError};

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flaxen-rundir-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_live_run_directory_is_refused_naming_its_process() {
    let dir = tmp_dir("lock");
    let live = RunLock::acquire(&dir).unwrap();
    // What a second run, `--resume` or `--overwrite` would meet: refused
    // before touching anything, with the holder's pid and command line.
    let err = RunLock::acquire(&dir).unwrap_err();
    match &err {
        RunLockError::Busy { dir: d, pid, .. } => {
            assert_eq!(d, &dir);
            assert_eq!(*pid, Some(std::process::id()));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("is in use by another run (pid ") && msg.contains("run_dir"),
        "{msg}"
    );
    drop(live);
    RunLock::acquire(&dir).unwrap();
}

#[test]
fn temp_files_of_an_interrupted_write_are_removed() {
    let dir = tmp_dir("tmp");
    let manager = CheckpointManager::new(&dir, 3).unwrap();
    manager.save(&Checkpoint::new(10)).unwrap();
    // What a kill -9 during `save` leaves: the temporary file, named after
    // the target and the writer's pid.
    let stale = dir.join(".ckpt-000000000020.safetensors.tmp-4242");
    std::fs::write(&stale, b"half a checkpoint").unwrap();
    // Files that are not ours stay.
    let other = dir.join("notes.tmp-4242");
    std::fs::write(&other, b"mine").unwrap();
    assert_eq!(manager.remove_temp_files().unwrap(), vec![stale.clone()]);
    assert!(!stale.exists() && other.exists());
    assert_eq!(manager.list().unwrap().len(), 1);
    assert!(manager.remove_temp_files().unwrap().is_empty());
}

#[test]
fn metrics_after_the_resumed_step_are_not_repeated() {
    let dir = tmp_dir("metrics");
    // A run logs steps 10..=50 and is killed mid-line; its last checkpoint
    // was at step 30.
    let mut log = MetricsLogger::new(&dir).unwrap();
    for step in [10, 20, 30, 40, 50] {
        log.log(step, "train", &[("loss", 1.0 / step as f64)])
            .unwrap();
    }
    drop(log);
    let path = dir.join("metrics.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"step\":60,\"spl");
    std::fs::write(&path, text).unwrap();
    // The resumed run drops what came after step 30, then logs it again.
    assert_eq!(JsonlWriter::truncate_after(&path, 30).unwrap(), 3);
    let mut log = MetricsLogger::new(&dir).unwrap();
    for step in [40, 50] {
        log.log(step, "train", &[("loss", 1.0 / step as f64)])
            .unwrap();
    }
    drop(log);
    let steps: Vec<u64> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, vec![10, 20, 30, 40, 50]);
    // No file yet: nothing to do.
    assert_eq!(
        JsonlWriter::truncate_after(dir.join("absent.jsonl"), 0).unwrap(),
        0
    );
}
