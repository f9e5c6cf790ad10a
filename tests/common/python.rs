//! Cross-checks that read flaxen's files with Python's own readers
//! (`tests/python/read_*.py`), shared by `tests/checkpoint_python.rs` and
//! `tests/logging_files.rs`: include with
//! `#[path = "common/python.rs"] mod python;`.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// Whether `python3` imports `modules` (`"safetensors, numpy"`). Where it
/// does not, the caller skips its check, with a note on stderr; CI
/// installs the readers and sets `FLAXEN_REQUIRE_PYTHON_CHECKS`, so that
/// there a check cannot pass by skipping.
pub fn has_modules(modules: &str) -> bool {
    let probe = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output();
    if matches!(&probe, Ok(o) if o.status.success()) {
        return true;
    }
    assert!(
        std::env::var_os("FLAXEN_REQUIRE_PYTHON_CHECKS").is_none(),
        "python3 with {modules} is not installed"
    );
    eprintln!("skipped: python3 with {modules} is not installed");
    false
}

/// What `tests/python/{script} {arg}` prints, as JSON; its stderr if it
/// fails.
pub fn read_with(script: &str, arg: &Path) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new("python3")
        .arg(script)
        .arg(arg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
