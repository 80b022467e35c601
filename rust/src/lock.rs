//! One writer per partition, across processes: an advisory lock on `.kafkalite.lock` in the
//! partition directory. The kernel drops it when the holder dies, so a crashed writer never
//! blocks the next one. The file holds the holder's pid for the error message.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{Error, IoContext, Result};

pub const LOCK_FILE: &str = ".kafkalite.lock";

/// A held partition lock; released on drop.
pub struct PartitionLock {
    _file: File,
}

impl PartitionLock {
    /// Take the lock or fail at once with `Error::Locked` naming the holder.
    pub fn acquire(dir: &Path) -> Result<PartitionLock> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .context(|| format!("cannot open lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let holder = if holder.is_empty() { "unknown process".to_string() } else { holder.to_string() };
                return Err(Error::Locked { path: dir.to_path_buf(), holder });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io(format!("cannot lock {}", path.display()), e));
            }
        }
        let me = format!("pid {}", std::process::id());
        file.set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(me.as_bytes()))
            .context(|| format!("cannot write lock file {}", path.display()))?;
        Ok(PartitionLock { _file: file })
    }
}
