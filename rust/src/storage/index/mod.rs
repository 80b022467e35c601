//! Kafka's sparse segment indexes: fixed-width big-endian entries in a file beside the `.log`.
//!
//! Entries are kept in memory for lookups and appended to the file with plain writes, so the
//! file always holds exactly `entries × entry size` bytes: what Kafka leaves after trimming an
//! index on roll or close. A file that is not a whole number of entries, or whose entries stop
//! increasing, is cut at the last good entry (Kafka's untrimmed indexes end in zeros).
//!
//! Descriptors follow use (Kafka's `LazyIndex` keeps none for an index it has not touched):
//! the append handle is opened when an entry is first written and dropped by `release` once
//! the segment is sealed, and a follower re-reads the file through a short-lived handle only
//! when a `stat` shows it grew. A partition of 10,000 sealed segments holds no index descriptor.

pub mod offset;
pub mod time;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::storage::error::{IoContext, Result};

pub use offset::{OffsetIndex, OffsetPosition};
pub use time::{TimeIndex, TimestampOffset};

/// One fixed-width entry type.
pub trait Entry: Copy + std::fmt::Debug {
    const SIZE: usize;
    fn decode(bytes: &[u8]) -> Self;
    fn encode(&self, out: &mut Vec<u8>);
    /// Entries must strictly increase by this key (Kafka's binary search relies on it).
    fn increases_from(&self, prev: &Self) -> bool;
}

/// An index file and its entries.
pub struct IndexFile<E: Entry> {
    path: PathBuf,
    /// Whether entries may be written (a writer's index).
    writable: bool,
    /// The append handle: opened on first write, dropped by `release`.
    file: Option<File>,
    entries: Vec<E>,
    /// Bytes of the file already read (for a read-only follower of a live index).
    read_len: u64,
    max_entries: usize,
}

impl<E: Entry> IndexFile<E> {
    /// Open (or, when writable, create) an index and load its valid entries.
    /// Returns the index and whether the file had to be cut (a sign of a crash or damage).
    pub fn open(path: &Path, writable: bool, max_index_bytes: usize) -> Result<(Self, bool)> {
        let mut index = IndexFile {
            path: path.to_path_buf(),
            writable,
            file: None,
            entries: Vec::new(),
            read_len: 0,
            max_entries: (max_index_bytes / E::SIZE).max(1),
        };
        if writable {
            // A writer's index exists from the start (an empty file is a valid index).
            index.writer()?;
        }
        let damaged = index.load_more()?;
        if damaged && writable {
            index.rewrite()?;
        }
        // Reopened by the first write: most indexes of an idle or one-record partition never get one.
        index.release();
        Ok((index, damaged))
    }

    /// The append handle, opened (and created) on first use.
    fn writer(&mut self) -> Result<&File> {
        if self.file.is_none() {
            let opts = crate::storage::nofollow::options().read(true).append(true).create(true).clone();
            self.file = Some(crate::storage::nofollow::open(&opts, &self.path, "index")?);
        }
        Ok(self.file.as_ref().unwrap())
    }

    /// Close the descriptor (a sealed segment's index); the next write or sync reopens it.
    pub fn release(&mut self) {
        self.file = None;
    }

    /// Whether a descriptor is held (for tests of descriptor use).
    pub fn holds_descriptor(&self) -> bool {
        self.file.is_some()
    }

    /// Read entries appended since the last load. Returns true if bad entries were skipped.
    /// Without a held handle, a `stat` tells whether there is anything new, and a handle is
    /// opened only for the read.
    pub fn load_more(&mut self) -> Result<bool> {
        use std::os::unix::fs::FileExt;
        let temporary;
        let reader = match &self.file {
            Some(f) => f,
            None => {
                match std::fs::symlink_metadata(&self.path) {
                    Ok(m) if m.is_file() && m.len() < self.read_len + E::SIZE as u64 => return Ok(false),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                    _ => {}
                }
                match crate::storage::nofollow::options().read(true).open(&self.path) {
                    Ok(f) => temporary = f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                    Err(e) => return Err(crate::storage::nofollow::describe(e, &self.path, "index")),
                }
                &temporary
            }
        };
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = reader
                .read_at(&mut chunk, self.read_len + bytes.len() as u64)
                .context(|| format!("cannot read index {}", self.path.display()))?;
            bytes.extend_from_slice(&chunk[..n]);
            if n < chunk.len() {
                break;
            }
        }
        let whole = bytes.len() / E::SIZE * E::SIZE;
        for chunk in bytes[..whole].chunks_exact(E::SIZE) {
            let e = E::decode(chunk);
            if let Some(prev) = self.entries.last() {
                if !e.increases_from(prev) {
                    return Ok(true);
                }
            }
            self.entries.push(e);
            self.read_len += E::SIZE as u64;
        }
        Ok(false)
    }

    /// Rewrite the file to hold exactly the in-memory entries.
    fn rewrite(&mut self) -> Result<()> {
        let mut bytes = Vec::with_capacity(self.entries.len() * E::SIZE);
        for e in &self.entries {
            e.encode(&mut bytes);
        }
        if self.writable {
            self.writer()?;
            let f = self.file.as_ref().expect("opened by writer()");
            f.set_len(0).context(|| format!("cannot truncate index {}", self.path.display()))?;
            (&*f).write_all(&bytes).context(|| format!("cannot write index {}", self.path.display()))?;
        }
        self.read_len = bytes.len() as u64;
        Ok(())
    }

    pub fn entries(&self) -> &[E] {
        &self.entries
    }

    pub fn last(&self) -> Option<&E> {
        self.entries.last()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Append one entry to memory and file.
    pub fn push(&mut self, e: E) -> Result<()> {
        let mut bytes = Vec::with_capacity(E::SIZE);
        e.encode(&mut bytes);
        if self.writable {
            self.writer()?;
            let f = self.file.as_ref().expect("opened by writer()");
            if let Err(err) = crate::storage::failpoint::hit("index.append").and_then(|()| (&*f).write_all(&bytes)) {
                // A partial entry (ENOSPC mid-write) would misalign every later one: cut the
                // file back to whole entries, best effort (a writer's open rebuilds it anyway).
                let _ = f.set_len(self.read_len);
                return Err(crate::storage::error::Error::io(
                    format!("cannot append to index {}", self.path.display()),
                    err,
                ));
            }
        }
        self.entries.push(e);
        self.read_len += E::SIZE as u64;
        Ok(())
    }

    /// Drop every entry (before a rebuild).
    pub fn clear(&mut self) -> Result<()> {
        self.entries.clear();
        self.rewrite()
    }

    /// Drop entries for which `keep` is false at the end (truncation of the log).
    pub fn truncate_while(&mut self, mut drop_last: impl FnMut(&E) -> bool) -> Result<()> {
        let before = self.entries.len();
        while self.entries.last().is_some_and(&mut drop_last) {
            self.entries.pop();
        }
        if self.entries.len() != before {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Largest entry at or below `target` by `key`, using binary search.
    pub fn floor_by<K: Ord>(&self, target: K, key: impl Fn(&E) -> K) -> Option<E> {
        let idx = self.entries.partition_point(|e| key(e) <= target);
        idx.checked_sub(1).map(|i| self.entries[i])
    }

    /// fdatasync the index. A released handle is reopened for it: fsync through any
    /// descriptor of the file flushes the writes made through another.
    pub fn sync(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        let temporary;
        let f = match &self.file {
            Some(f) => f,
            None => {
                temporary = crate::storage::nofollow::open_read(&self.path, "index")?;
                &temporary
            }
        };
        f.sync_data().context(|| format!("cannot sync index {}", self.path.display()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
