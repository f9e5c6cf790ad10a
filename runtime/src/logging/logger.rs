//! One logger for a run directory: JSON lines and TensorBoard together.

use std::path::{Path, PathBuf};

use super::{EventWriter, JsonlWriter, LoggingError};

/// Writes every metric both to `<run_dir>/metrics.jsonl` (appended, so a
/// resumed run continues it) and to a TensorBoard event file in `<run_dir>`
/// under the tag `<split>/<name>` (e.g. `train/loss`, `test/accuracy`).
///
/// ```no_run
/// use flaxen_runtime::logging::MetricsLogger;
///
/// let mut log = MetricsLogger::new("runs/demo").unwrap();
/// log.log(500, "test", &[("loss", 0.08), ("accuracy", 0.981)]).unwrap();
/// log.flush().unwrap();
/// ```
#[derive(Debug)]
pub struct MetricsLogger {
    dir: PathBuf,
    jsonl: JsonlWriter,
    events: EventWriter,
}

impl MetricsLogger {
    /// Creates `run_dir` if needed and opens both files in it.
    pub fn new(run_dir: impl AsRef<Path>) -> Result<Self, LoggingError> {
        let dir = run_dir.as_ref().to_path_buf();
        let events = EventWriter::new(&dir)?;
        let jsonl = JsonlWriter::append(dir.join("metrics.jsonl"))?;
        Ok(Self { dir, jsonl, events })
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The JSON lines file.
    pub fn jsonl_path(&self) -> &Path {
        self.jsonl.path()
    }

    /// The TensorBoard event file.
    pub fn events_path(&self) -> &Path {
        self.events.path()
    }

    /// Logs `metrics` of `split` at `step`; flushed to disk, so a crash
    /// loses nothing already logged.
    pub fn log(
        &mut self,
        step: u64,
        split: &str,
        metrics: &[(&str, f64)],
    ) -> Result<(), LoggingError> {
        self.jsonl.write(step, split, metrics)?;
        for (name, value) in metrics {
            self.events
                .add_scalar(&format!("{split}/{name}"), *value as f32, step)?;
        }
        self.flush()
    }

    /// Flushes both files.
    pub fn flush(&mut self) -> Result<(), LoggingError> {
        self.jsonl.flush()?;
        self.events.flush()
    }
}
