//! A directory of checkpoints with keep-last-N rotation.

use std::path::{Path, PathBuf};

use super::{atomic, Checkpoint, CheckpointError};

/// Saves checkpoints as `<dir>/ckpt-<step, 12 digits>.safetensors`, keeps the
/// newest `keep` of them (by step), and restores the newest.
///
/// ```no_run
/// use flaxen_runtime::checkpoint::{Checkpoint, CheckpointManager};
///
/// let manager = CheckpointManager::new("runs/a/checkpoints", 3).unwrap();
/// let path = manager.save(&Checkpoint::new(500)).unwrap();
/// assert!(path.ends_with("ckpt-000000000500.safetensors"));
/// let latest = manager.restore_latest().unwrap().unwrap();
/// assert_eq!(latest.step(), 500);
/// ```
#[derive(Debug, Clone)]
pub struct CheckpointManager {
    dir: PathBuf,
    keep: usize,
}

const PREFIX: &str = "ckpt-";
const SUFFIX: &str = ".safetensors";

impl CheckpointManager {
    /// Manages `dir` (created if missing), keeping the newest `keep`
    /// checkpoints; `keep == 0` keeps all of them.
    pub fn new(dir: impl Into<PathBuf>, keep: usize) -> Result<Self, CheckpointError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|error| CheckpointError::Io {
            path: dir.clone(),
            error,
        })?;
        Ok(Self { dir, keep })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file name a checkpoint of `step` gets.
    pub fn path_for(&self, step: u64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{step:012}{SUFFIX}"))
    }

    /// Writes `ckpt` atomically, then deletes all but the newest `keep`
    /// checkpoints. Returns the new file's path.
    ///
    /// A checkpoint holding NaN or infinity is refused before anything is
    /// written or deleted, so a diverged run never replaces or rotates out a
    /// good checkpoint. Rotation only deletes checkpoints of earlier steps
    /// than `ckpt`'s: never the file just written.
    pub fn save(&self, ckpt: &Checkpoint) -> Result<PathBuf, CheckpointError> {
        let path = self.path_for(ckpt.step());
        ckpt.save(&path)?;
        if self.keep > 0 {
            let all = self.list()?;
            let excess = all.len().saturating_sub(self.keep);
            let old: Vec<&PathBuf> = all[..excess]
                .iter()
                .filter(|(step, _)| *step < ckpt.step())
                .map(|(_, p)| p)
                .collect();
            for old in &old {
                std::fs::remove_file(old).map_err(|error| CheckpointError::Io {
                    path: old.to_path_buf(),
                    error,
                })?;
            }
            if !old.is_empty() {
                atomic::sync_dir(&self.dir).map_err(|error| CheckpointError::Io {
                    path: self.dir.clone(),
                    error,
                })?;
            }
        }
        Ok(path)
    }

    /// Deletes the temporary files that writes interrupted by a crash or a
    /// kill left in the directory (a completed write renames its temporary
    /// file; these never become checkpoints) and returns their paths.
    ///
    /// Call it only while no other process writes to the directory (e.g.
    /// holding the run directory's [`RunLock`](crate::run_lock::RunLock)):
    /// it would delete another writer's file in progress.
    ///
    /// ```
    /// use flaxen_runtime::checkpoint::{Checkpoint, CheckpointManager};
    ///
    /// let dir = std::env::temp_dir().join(format!("flaxen-doc-tmp-{}", std::process::id()));
    /// let manager = CheckpointManager::new(&dir, 3).unwrap();
    /// std::fs::write(dir.join(".ckpt-000000000001.safetensors.tmp-123"), b"partial").unwrap();
    /// assert_eq!(manager.remove_temp_files().unwrap().len(), 1);
    /// assert!(manager.list().unwrap().is_empty());
    /// # std::fs::remove_dir_all(dir).unwrap();
    /// ```
    pub fn remove_temp_files(&self) -> Result<Vec<PathBuf>, CheckpointError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| CheckpointError::Io { path, error }
        };
        let mut removed = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let entry = entry.map_err(io(&self.dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if atomic::is_temp_name(name) && entry.file_type().is_ok_and(|t| t.is_file()) {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(io(&path))?;
                removed.push(path);
            }
        }
        if !removed.is_empty() {
            atomic::sync_dir(&self.dir).map_err(io(&self.dir))?;
        }
        Ok(removed)
    }

    /// Every checkpoint in the directory as `(step, path)`, oldest first.
    /// Temporary files of interrupted writes are not listed.
    pub fn list(&self) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
        let io = |error| CheckpointError::Io {
            path: self.dir.clone(),
            error,
        };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let step = name
                .strip_prefix(PREFIX)
                .and_then(|s| s.strip_suffix(SUFFIX))
                .and_then(|s| s.parse::<u64>().ok());
            if let Some(step) = step {
                out.push((step, entry.path()));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The newest checkpoint's path, if any.
    pub fn latest(&self) -> Result<Option<PathBuf>, CheckpointError> {
        Ok(self.list()?.pop().map(|(_, p)| p))
    }

    /// Reads and validates the newest checkpoint; `Ok(None)` if there is none.
    ///
    /// A corrupt newest file is an error naming it (writes are atomic, so
    /// corruption is not an interrupted save and should not be skipped
    /// silently); delete it to fall back to the previous one.
    pub fn restore_latest(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        self.latest()?.map(Checkpoint::load).transpose()
    }
}
