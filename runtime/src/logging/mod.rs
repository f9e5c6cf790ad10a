//! Logging: a live progress bar, metrics as JSON lines, TensorBoard event
//! files, and one [`MetricsLogger`] that writes both files for a run.
//!
//! ```no_run
//! use flaxen_runtime::logging::{MetricsLogger, Progress};
//!
//! let mut progress = Progress::new(1000, 32 * 5); // 1000 scans of 5 steps, batch 32
//! let mut metrics = MetricsLogger::new("runs/demo").unwrap();
//! for scan in 1..=1000u64 {
//!     let (loss, accuracy) = (0.1, 0.97); // read once per scan
//!     progress.update(scan, loss, accuracy);
//!     metrics
//!         .log(scan * 5, "train", &[("loss", loss as f64), ("accuracy", accuracy as f64)])
//!         .unwrap();
//! }
//! progress.finish();
//! ```

mod jsonl;
mod logger;
mod progress;
pub mod tensorboard;

pub use jsonl::JsonlWriter;
pub use logger::MetricsLogger;
pub use progress::Progress;
pub use tensorboard::EventWriter;

use std::path::PathBuf;

/// Why a log file could not be written or read back.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// The file system failed. The message holds the cause, which is
    /// therefore not also chained as `source()` (it would print twice under
    /// anyhow's "Caused by").
    #[error("{path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// A file read back is malformed (bad framing, CRC or encoding).
    #[error("{path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        reason: String,
    },
    /// A metric name or split that cannot be written (empty, or `step`/`split`).
    #[error("invalid metric name `{0}`")]
    Name(String),
}
