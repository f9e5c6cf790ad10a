//! Metrics as JSON lines.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::LoggingError;

/// Appends one JSON object per line:
/// `{"step":100,"split":"train","loss":0.25,"accuracy":0.9}`, keys in the
/// order given. Numbers are written in their shortest round-trip form (as
/// `f32` when they are one), non-finite values as `null` (JSON has no NaN).
///
/// ```
/// use flaxen_runtime::logging::JsonlWriter;
///
/// let line = JsonlWriter::format_line(100, "train", &[("loss", 0.1f32 as f64), ("accuracy", 0.5)])
///     .unwrap();
/// assert_eq!(line, r#"{"step":100,"split":"train","loss":0.1,"accuracy":0.5}"#);
/// ```
#[derive(Debug)]
pub struct JsonlWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl JsonlWriter {
    /// Opens `path` for appending (created if missing), so a resumed run
    /// continues the same file.
    pub fn append(path: impl AsRef<Path>) -> Result<Self, LoggingError> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|error| LoggingError::Io {
                path: path.clone(),
                error,
            })?;
        Ok(Self {
            path,
            out: BufWriter::new(file),
        })
    }

    /// Drops the lines of `path` logged after `step` (and any line that is
    /// not a complete JSON object, such as one cut by a kill mid-write), so
    /// that a run resumed from the checkpoint of `step` does not log the
    /// steps after it twice. Returns how many lines were dropped; a missing
    /// file is left missing. The file is replaced atomically.
    ///
    /// ```
    /// use flaxen_runtime::logging::JsonlWriter;
    ///
    /// let path = std::env::temp_dir().join(format!("flaxen-doc-{}.jsonl", std::process::id()));
    /// std::fs::write(&path, "{\"step\":5,\"split\":\"train\"}\n{\"step\":10,\"split\":\"train\"}\n{\"st").unwrap();
    /// assert_eq!(JsonlWriter::truncate_after(&path, 5).unwrap(), 2);
    /// assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"step\":5,\"split\":\"train\"}\n");
    /// # std::fs::remove_file(path).unwrap();
    /// ```
    pub fn truncate_after(path: impl AsRef<Path>, step: u64) -> Result<usize, LoggingError> {
        let path = path.as_ref();
        let io = |error| LoggingError::Io {
            path: path.to_path_buf(),
            error,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io(e)),
        };
        let mut kept = String::with_capacity(text.len());
        let mut dropped = 0;
        // Only lines ending in a newline are complete.
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let (line, complete) = match rest.find('\n') {
                Some(i) => {
                    let line = &rest[..i];
                    rest = &rest[i + 1..];
                    (line, true)
                }
                None => (std::mem::take(&mut rest), false),
            };
            let line_step = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("step").and_then(serde_json::Value::as_u64));
            match line_step {
                Some(s) if complete && s <= step => {
                    kept.push_str(line);
                    kept.push('\n');
                }
                _ => dropped += 1,
            }
        }
        if dropped > 0 {
            crate::checkpoint::write_atomic(path, kept.as_bytes()).map_err(io)?;
        }
        Ok(dropped)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One line, without the newline. Fails on an empty name or one of the
    /// reserved keys `step` and `split`.
    pub fn format_line(
        step: u64,
        split: &str,
        metrics: &[(&str, f64)],
    ) -> Result<String, LoggingError> {
        let mut line = format!("{{\"step\":{step},\"split\":{}", json_string(split));
        for (name, value) in metrics {
            if name.is_empty() || *name == "step" || *name == "split" {
                return Err(LoggingError::Name((*name).to_string()));
            }
            let value = json_number(*value);
            line.push_str(&format!(",{}:{value}", json_string(name)));
        }
        line.push('}');
        Ok(line)
    }

    /// Writes one line (buffered; see [`JsonlWriter::flush`]).
    pub fn write(
        &mut self,
        step: u64,
        split: &str,
        metrics: &[(&str, f64)],
    ) -> Result<(), LoggingError> {
        let line = Self::format_line(step, split, metrics)?;
        writeln!(self.out, "{line}").map_err(|error| LoggingError::Io {
            path: self.path.clone(),
            error,
        })
    }

    /// Flushes buffered lines to the file.
    pub fn flush(&mut self) -> Result<(), LoggingError> {
        self.out.flush().map_err(|error| LoggingError::Io {
            path: self.path.clone(),
            error,
        })
    }
}

/// The shortest decimal that reads back as the same number: as an `f32`
/// when the value is one (it then reads back as the same `f32`) (a loss read from an f32 device tensor prints as
/// `0.1`, not `0.10000000149011612`), else as an `f64`. Rust's `{:?}` float
/// syntax (`1.0`, `0.25`, `1e-7`) is valid JSON; NaN and infinities are not,
/// so they become `null`.
fn json_number(v: f64) -> String {
    if !v.is_finite() {
        "null".to_string()
    } else if (v as f32) as f64 == v {
        format!("{:?}", v as f32)
    } else {
        format!("{v:?}")
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}
