//! The cleaner's swap: a group of cleaned segments replaces the old ones so that a crash leaves
//! the old or the new segments, never a gap (`replace_group`, Kafka's `replaceSegments`), and
//! opening a log finishes a swap a crash interrupted after its commit point
//! (`finish_interrupted_swaps`, as Kafka's `LogLoader`). What is kept is decided in `cleaner.rs`.

use std::io::{Read, Write};
use std::path::Path;

use crate::storage::checkpoint::{remove_if_exists, sync_dir, write_atomically};
use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::{
    file_name, marked_path, segment_path, CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SEGMENT_SUFFIXES, SWAP_SUFFIX,
    TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
};
use crate::storage::log::Log;
use crate::storage::segment::Segment;

use super::{CleanStats, Cleaned};

impl Log {
    /// Replace segments `[first, first + group.len())` with one segment holding their cleaned
    /// batches, named by the first one's base offset (Kafka's `replaceSegments`). Crash safe at
    /// every step, and never a gap for readers:
    /// 1. `X.log.cleaned` written and fsynced (a crash: it is deleted at open, nothing changed);
    /// 2. renamed to `X.log.swap`, directory fsynced: the commit point (a crash from here on:
    ///    the open completes the swap, Kafka's way: segments in `[X, the swap's next offset)`
    ///    are deleted and the swap renamed to `X.log`);
    /// 3. X's indexes removed, then `X.log` replaced by the new file (a second link to the swap,
    ///    renamed over it): readers now find the new X, and the old members after it still
    ///    hold the same latest values for their offsets;
    /// 4. the other members deleted, oldest first (so what a crash leaves beyond the swap's last
    ///    offset is a run of the newest members, whose records were all removed: consistent);
    /// 5. the swap name removed; the new segment's indexes are rebuilt.
    pub(super) fn replace_group(&mut self, first: usize, group: Vec<Cleaned>, stats: &mut CleanStats) -> Result<()> {
        self.segments_changing()?;
        let members: Vec<i64> = self.segments[first..first + group.len()].iter().map(|s| s.base_offset).collect();
        let base = members[0];
        stats.segments_rewritten += members.len() as u64;
        stats.bytes_before += self.segments[first..first + group.len()].iter().map(|s| s.size() as u64).sum::<u64>();
        let txn = self.merged_txn_index(&members)?;
        let dir = self.dir.clone();
        let cleaned_path = marked_path(&dir, base, LOG_SUFFIX, CLEANED_SUFFIX);
        let swap_path = marked_path(&dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let cannot = |what: &str, p: &Path| format!("cannot {what} {}", p.display());
        let mut file = crate::storage::nofollow::open(
            crate::storage::nofollow::options().write(true).create(true).truncate(true),
            &cleaned_path,
            "cleaned segment",
        )?;
        let mut written = 0u64;
        crate::storage::failpoint::hit("cleaner.write_cleaned")
            .and_then(|()| {
                for c in &group {
                    file.write_all(&c.bytes)?;
                    written += c.bytes.len() as u64;
                }
                file.sync_all()
            })
            .context(|| cannot("write", &cleaned_path))?;
        drop(file);
        drop(group);
        stats.bytes_after += written;
        if let Some(txn) = &txn {
            write_atomically(&dir, &format!("{}{CLEANED_SUFFIX}", file_name(base, TXN_INDEX_SUFFIX)), txn)?;
        }
        crate::storage::failpoint::hit("cleaner.rename_swap")
            .and_then(|()| std::fs::rename(&cleaned_path, &swap_path))
            .context(|| cannot("commit", &swap_path))?;
        sync_dir(&dir)?;
        // Committed: a failure from here on leaves the rest to the next open (poisoned until
        // then); our old segments stay readable meanwhile (their maps outlive the files).
        self.finish_replace(first, &members, txn.is_some())
            .inspect_err(|e| self.poison(format!("cleaning stopped after its commit point: {e}")))
    }

    fn finish_replace(&mut self, first: usize, members: &[i64], txn: bool) -> Result<()> {
        let base = members[0];
        let dir = self.dir.clone();
        let cleaned_path = marked_path(&dir, base, LOG_SUFFIX, CLEANED_SUFFIX);
        let swap_path = marked_path(&dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let log_path = segment_path(&dir, base, LOG_SUFFIX);
        let cannot = |what: &str, p: &Path| format!("cannot {what} {}", p.display());
        crate::storage::failpoint::hit("cleaner.remove_indexes").context(|| cannot("finish cleaning", &dir))?;
        for ext in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            remove_if_exists(&segment_path(&dir, base, ext))?;
        }
        crate::storage::failpoint::hit("cleaner.replace_log")
            .and_then(|()| std::fs::hard_link(&swap_path, &cleaned_path))
            .and_then(|()| std::fs::rename(&cleaned_path, &log_path))
            .context(|| cannot("replace", &log_path))?;
        if txn {
            let from = marked_path(&dir, base, TXN_INDEX_SUFFIX, CLEANED_SUFFIX);
            std::fs::rename(&from, segment_path(&dir, base, TXN_INDEX_SUFFIX)).context(|| cannot("rename", &from))?;
        }
        sync_dir(&dir)?;
        for &member in &members[1..] {
            crate::storage::failpoint::hit("cleaner.delete_old")
                .context(|| cannot("delete an old segment of", &dir))?;
            delete_segment_files(&dir, member)?;
        }
        crate::storage::failpoint::hit("cleaner.remove_swap")
            .and_then(|()| std::fs::remove_file(&swap_path))
            .context(|| cannot("remove", &swap_path))?;
        sync_dir(&dir)?;
        let mut cleaned = Segment::open(&dir, base, true, self.settings(), crate::storage::log::now_ms())?;
        cleaned.recover()?;
        cleaned.seal()?;
        cleaned.sync_all()?;
        self.segments.splice(first..first + members.len(), [cleaned]);
        self.segments_changed();
        Ok(())
    }

    /// The members' `.txnindex` entries (offsets only, so still true after cleaning) as one
    /// file's bytes; None when no member has one.
    fn merged_txn_index(&self, members: &[i64]) -> Result<Option<Vec<u8>>> {
        let mut merged = Vec::new();
        let mut any = false;
        for &m in members {
            let path = segment_path(&self.dir, m, TXN_INDEX_SUFFIX);
            match crate::storage::nofollow::open_read(&path, "transaction index") {
                Ok(mut f) => {
                    any = true;
                    f.read_to_end(&mut merged).context(|| format!("cannot read {}", path.display()))?;
                }
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        merged.truncate(merged.len() / 34 * 34);
        Ok(any.then_some(merged))
    }
}

/// Delete one segment's files (the log first: index files without a log are dropped at open).
fn delete_segment_files(dir: &Path, base: i64) -> Result<()> {
    for ext in SEGMENT_SUFFIXES {
        remove_if_exists(&segment_path(dir, base, ext))?;
    }
    Ok(())
}

/// At open (the only writer): complete the swaps a crash interrupted after their commit point,
/// as Kafka's `LogLoader` does: every segment file in `[X, next offset of X.log.swap)` is
/// deleted (X's own indexes too: they are rebuilt) and the swap renamed to `X.log`.
/// Returns whether there was one.
pub(crate) fn finish_interrupted_swaps(dir: &Path) -> Result<bool> {
    let mut swaps = Vec::new();
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(base) =
            name.strip_suffix(&format!("{LOG_SUFFIX}{SWAP_SUFFIX}")).and_then(|stem| stem.parse::<i64>().ok())
        {
            swaps.push(base);
        } else if let Some(base) = name.split('.').next().and_then(|stem| stem.parse::<i64>().ok()) {
            if !name.ends_with(SWAP_SUFFIX) && !name.ends_with(CLEANED_SUFFIX) {
                bases.push(base);
            }
        }
    }
    let mut found = false;
    for base in swaps {
        let swap = marked_path(dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let next = next_offset_of(&swap, base)?;
        for &b in bases.iter().filter(|&&b| b > base && b < next) {
            delete_segment_files(dir, b)?;
        }
        for ext in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            remove_if_exists(&segment_path(dir, base, ext))?;
        }
        let log = segment_path(dir, base, LOG_SUFFIX);
        if same_file(&swap, &log) {
            // Interrupted after X.log became the new file (a second link to the swap): rename
            // between two links of one file does nothing, so drop the swap name.
            std::fs::remove_file(&swap).context(|| format!("cannot remove {}", swap.display()))?;
        } else {
            std::fs::rename(&swap, &log)
                .context(|| format!("cannot rename {} to {}", swap.display(), log.display()))?;
        }
        sync_dir(dir)?;
        found = true;
    }
    Ok(found)
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// One past the last offset of the whole batches in a segment file (its base when it has none):
/// Kafka's `readNextOffset`, from the batch headers alone.
fn next_offset_of(path: &Path, base: i64) -> Result<i64> {
    use std::os::unix::fs::FileExt;
    let file = crate::storage::nofollow::open_read(path, "segment")?;
    let len = file.metadata().context(|| format!("cannot stat {}", path.display()))?.len();
    let (mut pos, mut next) = (0u64, base);
    let mut head = [0u8; 27];
    while pos + 61 <= len {
        file.read_exact_at(&mut head, pos).context(|| format!("cannot read {}", path.display()))?;
        let base_offset = i64::from_be_bytes(head[0..8].try_into().unwrap());
        let length = i32::from_be_bytes(head[8..12].try_into().unwrap());
        let last_delta = i32::from_be_bytes(head[23..27].try_into().unwrap());
        if length < 49 || pos + 12 + length as u64 > len {
            break;
        }
        next = next.max(base_offset + last_delta as i64 + 1);
        pos += 12 + length as u64;
    }
    Ok(next)
}
