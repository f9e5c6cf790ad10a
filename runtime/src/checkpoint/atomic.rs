//! Crash-safe file replacement.

use std::io::Write;
use std::path::Path;

/// What the name of a temporary file holds between the target's name and
/// the writer's pid: `.<name>.tmp-<pid>`.
const TEMP_MARK: &str = ".tmp-";

/// Whether `name` is the name of a temporary file of [`write_atomic`].
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.starts_with('.')
        && name
            .rsplit_once(TEMP_MARK)
            .is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Writes `bytes` to `path` so that a reader sees either the old file or the
/// complete new one, never a partial file, even across a power loss: write a
/// temporary file in the same directory (same file system, so the rename is
/// atomic), fsync it, rename it over `path`, then fsync the directory so the
/// rename itself is durable.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}{TEMP_MARK}{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Makes a directory's entries (renames, deletions) durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        // Windows cannot open a directory as a file; NTFS journals renames.
        let _ = dir;
        Ok(())
    }
}
