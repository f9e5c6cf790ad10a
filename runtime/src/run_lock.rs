//! An exclusive lock on a run directory, held for the run's life, so that
//! two processes never write the same run (interleaved metrics, each
//! rotating the other's checkpoints away, `--overwrite` deleting a live
//! run's files).
//!
//! The lock is the operating system's advisory whole-file lock (`flock` on
//! Unix, `LockFileEx` on Windows) on `<dir>/.lock`, taken with std's
//! `File::try_lock` (the same call the `fs4` and `fd-lock` crates wrap,
//! stable in std since Rust 1.89, so no dependency is needed). The kernel
//! releases it when the process exits, however it exits (a crash or
//! `kill -9` included), so a stale lock cannot outlive its run. The holder
//! writes its pid into the file so that a refused run can name it.
//!
//! ```
//! use flaxen_runtime::run_lock::{RunLock, RunLockError};
//!
//! let dir = std::env::temp_dir().join(format!("flaxen-doc-lock-{}", std::process::id()));
//! let lock = RunLock::acquire(&dir).unwrap();
//! // A second run on the same directory is refused, naming the first.
//! let err = RunLock::acquire(&dir).unwrap_err();
//! assert!(matches!(err, RunLockError::Busy { pid: Some(p), .. } if p == std::process::id()));
//! drop(lock);
//! let _again = RunLock::acquire(&dir).unwrap();
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the run directory.
pub const LOCK_FILE: &str = ".lock";

/// Why a run directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum RunLockError {
    /// Another process holds the lock: a run is live in the directory.
    #[error(
        "{dir} is in use by another run ({}); wait for it to end or choose another directory",
        holder_text(.pid, .command)
    )]
    Busy {
        /// The run directory.
        dir: PathBuf,
        /// The holder's pid, as it wrote it into the lock file (`None` if it
        /// has not written it yet, or the file does not hold one).
        pid: Option<u32>,
        /// The holder's command line, where the system shows it (Linux).
        command: Option<String>,
    },
    /// The directory or the lock file could not be created, opened or
    /// locked. The message holds the cause, which is therefore not also
    /// chained as `source()`.
    #[error("{path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
}

fn holder_text(pid: &Option<u32>, command: &Option<String>) -> String {
    match (pid, command) {
        (Some(pid), Some(cmd)) => format!("pid {pid}: {cmd}"),
        (Some(pid), None) => format!("pid {pid}"),
        (None, _) => "its pid is not recorded yet".into(),
    }
}

/// The lock on one run directory; dropping it (or the process ending)
/// releases it. The lock file itself stays: deleting it on release would let
/// a process that had just opened the old file lock a file nobody else sees.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    dir: PathBuf,
}

impl RunLock {
    /// Creates `dir` if needed and locks it, or fails with
    /// [`RunLockError::Busy`] naming the process that holds it. Never waits.
    pub fn acquire(dir: impl AsRef<Path>) -> Result<Self, RunLockError> {
        let dir = dir.as_ref().to_path_buf();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| RunLockError::Io { path, error }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = dir.join(LOCK_FILE);
        // No truncation on open: the file may be the live holder's, whose
        // pid a refused run reads.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let pid = text.trim().parse::<u32>().ok();
                return Err(RunLockError::Busy {
                    dir,
                    pid,
                    command: pid.and_then(command_of),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        let mut record = || -> std::io::Result<()> {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            writeln!(file, "{}", std::process::id())?;
            file.flush()
        };
        record().map_err(io(&path))?;
        Ok(Self { file, dir })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The lock file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first makes the
        // release immediate even if a clone of the descriptor lives on.
        let _ = self.file.unlock();
    }
}

/// The command line of process `pid`, where the system exposes it.
fn command_of(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then(|| args.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("flaxen-lock-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder() {
        let dir = tmp("busy");
        let lock = RunLock::acquire(&dir).unwrap();
        let text = std::fs::read_to_string(lock.path()).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        let err = RunLock::acquire(&dir).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!(
                "in use by another run (pid {}",
                std::process::id()
            )),
            "{msg}"
        );
        assert!(msg.contains(dir.to_str().unwrap()), "{msg}");
        // The refused attempt did not clobber the holder's pid.
        assert_eq!(std::fs::read_to_string(lock.path()).unwrap(), text);
        drop(lock);
        let again = RunLock::acquire(&dir).unwrap();
        assert_eq!(again.dir(), dir);
        drop(again);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_stale_lock_file_does_not_block() {
        // A run killed with -9 leaves its lock file (with its pid) behind,
        // but not its lock.
        let dir = tmp("stale");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(LOCK_FILE), "4000000000\n").unwrap();
        let lock = RunLock::acquire(&dir).unwrap();
        let text = std::fs::read_to_string(lock.path()).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        drop(lock);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
