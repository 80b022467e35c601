//! Small files written atomically (temp file, fsync, rename, fsync the directory) and the
//! per-partition markers kafkalite keeps beside Kafka's own files.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use crate::error::{IoContext, Result};

/// Present after a clean close; its absence at open means "recover the active segment".
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafkalite-clean-shutdown";
/// The log start offset, when it is above the first segment's base (Kafka keeps this in
/// the log directory's `log-start-offset-checkpoint`).
pub const LOG_START_OFFSET_FILE: &str = ".kafkalite-log-start-offset";

/// The cleaner's first dirty offset: compaction resumes from here (Kafka keeps this in the
/// log directory's `cleaner-offset-checkpoint`).
pub const CLEANER_OFFSET_FILE: &str = ".kafkalite-cleaner-offset";

/// Replace `dir/name` with `contents` atomically and durably.
pub fn write_atomically(dir: &Path, name: &str, contents: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let dst = dir.join(name);
    let mut f =
        crate::nofollow::open(crate::nofollow::options().write(true).create(true).truncate(true), &tmp, "checkpoint")?;
    crate::failpoint::hit("checkpoint.write")
        .and_then(|()| f.write_all(contents))
        .and_then(|_| f.sync_all())
        .context(|| format!("cannot write {}", tmp.display()))?;
    crate::failpoint::hit("checkpoint.rename")
        .and_then(|()| std::fs::rename(&tmp, &dst))
        .context(|| format!("cannot rename {} to {}", tmp.display(), dst.display()))?;
    sync_dir(dir)
}

/// fsync a directory so that renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    crate::failpoint::hit("dir.sync")
        .and_then(|()| File::open(dir))
        .and_then(|d| d.sync_all())
        .context(|| format!("cannot sync directory {}", dir.display()))
}

/// Delete a file; one that is already gone is fine.
pub fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(crate::error::Error::io(format!("cannot delete {}", path.display()), e)),
    }
}

/// Read a decimal offset file; None when absent or unreadable (Kafka treats a bad
/// checkpoint as empty).
pub fn read_offset(dir: &Path, name: &str) -> Option<i64> {
    let mut text = String::new();
    crate::nofollow::open_read(&dir.join(name), "checkpoint").ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}
