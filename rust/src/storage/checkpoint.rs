//! Small files written atomically (temp file, fsync, rename, fsync the directory) and the
//! per-partition markers kafkalite keeps beside Kafka's own files.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::storage::error::{IoContext, Result};
use crate::storage::files::{
    CHECKPOINT_LOCK_FILE, KAFKA_CLEANER_OFFSET, KAFKA_LOG_START_OFFSET, KAFKA_META_PROPERTIES, KAFKA_RECOVERY_POINT,
    TMP_SUFFIX, TOPICS_FILE,
};

/// The temp file just opened must be a regular file with no other name: a FIFO or device is
/// never written (a FIFO with a reader would swallow the bytes), and a hard link to a file
/// elsewhere (say outside the data directory) is never truncated or overwritten through.
fn check_temp(f: &File, tmp: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = f.metadata().context(|| format!("cannot stat {}", tmp.display()))?;
    if meta.file_type().is_file() && meta.nlink() <= 1 {
        return Ok(());
    }
    let why = if meta.file_type().is_file() { "a file with other names (a hard link)" } else { "not a regular file" };
    Err(crate::storage::error::Error::io_at(
        tmp,
        format!("cannot write {}: it is {why}; remove it", tmp.display()),
        std::io::Error::from(std::io::ErrorKind::InvalidInput),
    ))
}

/// What tells one version of a file replaced by `write_atomically` from another (device, inode,
/// size, mtime s and ns): a rename gives it a new inode, an edit in place a new size or mtime.
/// None: there is no such file.
pub type FileStamp = (u64, u64, u64, i64, i64);

pub fn file_stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// Replace `dir/name` with `contents` atomically and durably.
pub fn write_atomically(dir: &Path, name: &str, contents: &[u8]) -> Result<()> {
    write_file(dir, name, contents, false)
}

/// `write_atomically` for a secret (the SCRAM credentials): the file is readable by its owner
/// only (0600) from its creation on, whatever the umask or a stale temp file's mode.
pub fn write_private_atomically(dir: &Path, name: &str, contents: &[u8]) -> Result<()> {
    write_file(dir, name, contents, true)
}

fn write_file(dir: &Path, name: &str, contents: &[u8], private: bool) -> Result<()> {
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let dst = dir.join(name);
    let mut opts = crate::storage::nofollow::options();
    // Not truncated at open, and O_NONBLOCK: whatever a crash or a hostile user left at the temp
    // name is checked first (`check_temp`), and a FIFO there fails the open (ENXIO, no reader)
    // instead of blocking the writer for good (a server's start, say).
    opts.write(true)
        .create(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32);
    if private {
        opts.mode(0o600);
    }
    let mut f = crate::storage::nofollow::open(&opts, &tmp, "checkpoint")?;
    check_temp(&f, &tmp)?;
    crate::storage::failpoint::hit("checkpoint.write")
        .and_then(|()| f.set_len(0))
        // `mode` applies only to a new file: a leftover temp file keeps its own, so set it.
        .and_then(|()| if private { f.set_permissions(std::fs::Permissions::from_mode(0o600)) } else { Ok(()) })
        .and_then(|()| f.write_all(contents))
        .and_then(|_| f.sync_all())
        .context(|| format!("cannot write {}", tmp.display()))?;
    crate::storage::failpoint::hit("checkpoint.rename")
        .and_then(|()| std::fs::rename(&tmp, &dst))
        .context(|| format!("cannot rename {} to {}", tmp.display(), dst.display()))?;
    sync_dir(dir)
}

/// fsync a directory so that renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    crate::storage::failpoint::hit("dir.sync")
        .and_then(|()| File::open(dir))
        .and_then(|d| d.sync_all())
        .context(|| format!("cannot sync directory {}", dir.display()))
}

/// Delete a file; one that is already gone is fine.
pub fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(crate::storage::error::Error::io(format!("cannot delete {}", path.display()), e)),
    }
}

/// Read a decimal offset file; None when absent or unreadable (Kafka treats a bad
/// checkpoint as empty).
pub fn read_offset(dir: &Path, name: &str) -> Option<i64> {
    let mut text = String::new();
    crate::storage::nofollow::open_read(&dir.join(name), "checkpoint").ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// A parent directory is a data directory (so its checkpoints are kept) when it holds
/// kafkalite's topic metadata or one of a broker's log-directory files. A partition opened on
/// its own (`Log(path)` in any folder) has no parent checkpoints.
const DATA_DIR_MARKERS: &[&str] =
    &[TOPICS_FILE, KAFKA_META_PROPERTIES, KAFKA_RECOVERY_POINT, KAFKA_LOG_START_OFFSET, KAFKA_CLEANER_OFFSET];

/// How long a writer waits for another one updating the same checkpoint file.
const CHECKPOINT_LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// One partition's entries in its data directory's Kafka checkpoint files.
#[derive(Clone, Debug)]
pub struct KafkaCheckpoints {
    data_dir: std::path::PathBuf,
    topic: String,
    partition: i32,
}

/// `(topic, partition, offset)` lines of a checkpoint file; None when absent or malformed
/// (Kafka reads a bad checkpoint as empty).
pub fn parse_checkpoint(text: &str) -> Option<Vec<(String, i32, i64)>> {
    let mut lines = text.lines();
    let version: i32 = lines.next()?.trim().parse().ok()?;
    if version != 0 {
        return None;
    }
    let Some(count) = lines.next() else { return Some(Vec::new()) };
    let count: usize = count.trim().parse().ok()?;
    let mut entries = Vec::with_capacity(count.min(1 << 16));
    for line in lines.by_ref().take(count) {
        let mut fields = line.split_whitespace();
        let (topic, partition, offset) = (fields.next()?, fields.next()?.parse().ok()?, fields.next()?.parse().ok()?);
        if fields.next().is_some() {
            return None;
        }
        entries.push((topic.to_string(), partition, offset));
    }
    (entries.len() == count).then_some(entries)
}

fn format_checkpoint(entries: &[(String, i32, i64)]) -> String {
    let mut text = format!("0\n{}\n", entries.len());
    for (topic, partition, offset) in entries {
        text.push_str(&format!("{topic} {partition} {offset}\n"));
    }
    text
}

impl KafkaCheckpoints {
    /// The checkpoints of partition directory `dir` (`<topic>-<partition>`), when its parent is a
    /// data directory; None for a partition opened on its own.
    pub fn for_partition(dir: &Path) -> Option<KafkaCheckpoints> {
        let name = dir.file_name()?.to_str()?;
        let (topic, partition) = name.rsplit_once('-')?;
        let partition: i32 = partition.parse().ok().filter(|p| *p >= 0)?;
        if topic.is_empty() {
            return None;
        }
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        DATA_DIR_MARKERS.iter().any(|m| parent.join(m).exists()).then(|| KafkaCheckpoints {
            data_dir: parent.to_path_buf(),
            topic: topic.to_string(),
            partition,
        })
    }

    fn entries(&self, file: &str) -> Vec<(String, i32, i64)> {
        let mut text = String::new();
        match crate::storage::nofollow::open_read(&self.data_dir.join(file), "checkpoint") {
            Ok(f) if (&f).read_to_string(&mut text).is_ok() => parse_checkpoint(&text).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// This partition's offset in `file`, if it has an entry.
    pub fn read(&self, file: &str) -> Option<i64> {
        self.entries(file).into_iter().find(|(t, p, _)| *t == self.topic && *p == self.partition).map(|e| e.2)
    }

    /// (inode, mtime s, mtime ns) of `file`: it is replaced by rename, so a change shows here.
    pub fn stamp(&self, file: &str) -> Option<(u64, i64, i64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(self.data_dir.join(file)).ok().map(|m| (m.ino(), m.mtime(), m.mtime_nsec()))
    }

    /// Set (Some) or remove (None) this partition's entry in `file`, keeping every other
    /// partition's, atomically (temp file, fsync, rename, fsync the directory) and under the
    /// data directory's checkpoint lock. Unchanged content is not rewritten.
    pub fn update(&self, file: &str, offset: Option<i64>) -> Result<()> {
        let _lock = self.lock()?;
        let mut entries = self.entries(file);
        let before = entries.clone();
        entries.retain(|(t, p, _)| !(*t == self.topic && *p == self.partition));
        if let Some(offset) = offset {
            entries.push((self.topic.clone(), self.partition, offset));
        }
        let exists = self.data_dir.join(file).exists();
        if exists && entries.len() == before.len() && entries.iter().all(|e| before.contains(e)) {
            return Ok(());
        }
        if !exists && offset.is_none() {
            return Ok(());
        }
        crate::storage::failpoint::hit("kafka_checkpoint.update")
            .context(|| format!("cannot update {}", self.data_dir.join(file).display()))?;
        write_atomically(&self.data_dir, file, format_checkpoint(&entries).as_bytes())
    }

    fn lock(&self) -> Result<File> {
        lock_data_dir(&self.data_dir)
    }
}

/// The data directory's checkpoint lock (an flock, released by the kernel if we die), waited
/// for at most `CHECKPOINT_LOCK_PATIENCE`: held around every read-modify-write of a file the
/// data directory's writers share.
pub fn lock_data_dir(data_dir: &Path) -> Result<File> {
    let path = data_dir.join(CHECKPOINT_LOCK_FILE);
    let file = crate::storage::nofollow::open(
        crate::storage::nofollow::options().read(true).write(true).create(true),
        &path,
        "lock file",
    )?;
    let started = std::time::Instant::now();
    if !crate::storage::lock::lock_exclusive_until(&file, &path, Some(started + CHECKPOINT_LOCK_PATIENCE))? {
        return Err(crate::storage::error::Error::LockTimeout {
            path,
            waited_ms: started.elapsed().as_millis() as u64,
            holder: "another kafkalite writer of this data directory".into(),
        });
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_text_round_trips_and_bad_files_read_as_empty() {
        let entries = vec![("a-b".to_string(), 0, 300), ("c".to_string(), 7, 1)];
        assert_eq!(parse_checkpoint(&format_checkpoint(&entries)).unwrap(), entries);
        assert_eq!(parse_checkpoint("0\n0\n").unwrap(), vec![]);
        assert_eq!(parse_checkpoint("0\n").unwrap(), vec![]);
        assert!(parse_checkpoint("1\n0\n").is_none());
        assert!(parse_checkpoint("0\n2\na 0 1\n").is_none());
        assert!(parse_checkpoint("0\n1\na x 1\n").is_none());
        assert!(parse_checkpoint("").is_none());
    }

    #[test]
    fn a_fifo_or_a_hard_link_at_the_temp_name_is_an_error_never_a_hang_or_a_write_through() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let tmp = d.path().join(format!("f{TMP_SUFFIX}"));
        // A FIFO with no reader: the open used to block for good (a server's start hung on
        // `.kafkalite-boot-id.tmp`).
        rustix::fs::mknodat(rustix::fs::CWD, &tmp, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o644), 0)
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = d.path().to_path_buf();
        std::thread::spawn(move || tx.send(write_atomically(&dir, "f", b"new").is_err()));
        let refused = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("blocked on a FIFO at the temp name");
        assert!(refused, "a FIFO at the temp name must be an error");
        assert!(!d.path().join("f").exists());
        std::fs::remove_file(&tmp).unwrap();
        // A hard link to a file elsewhere: neither truncated nor written through.
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::fs::hard_link(&victim, &tmp).unwrap();
        assert!(write_atomically(d.path(), "f", b"new").is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        std::fs::remove_file(&tmp).unwrap();
        // A stale regular temp file (a crash mid-write) is simply replaced.
        std::fs::write(&tmp, b"stale and longer than the new contents").unwrap();
        write_atomically(d.path(), "f", b"new").unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"new");
    }

    #[test]
    fn entries_are_kept_per_partition_and_only_in_data_dirs() {
        let tmp = std::env::temp_dir().join(format!("kl-ckpt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("t-x-3")).unwrap();
        assert!(KafkaCheckpoints::for_partition(&tmp.join("t-x-3")).is_none(), "no data dir markers yet");
        std::fs::write(tmp.join(TOPICS_FILE), "{}").unwrap();
        let c = KafkaCheckpoints::for_partition(&tmp.join("t-x-3")).unwrap();
        assert_eq!((c.topic.as_str(), c.partition), ("t-x", 3));
        std::fs::write(tmp.join(KAFKA_LOG_START_OFFSET), "0\n1\nother 0 5\n").unwrap();
        c.update(KAFKA_LOG_START_OFFSET, Some(42)).unwrap();
        assert_eq!(c.read(KAFKA_LOG_START_OFFSET), Some(42));
        let text = std::fs::read_to_string(tmp.join(KAFKA_LOG_START_OFFSET)).unwrap();
        assert_eq!(text, "0\n2\nother 0 5\nt-x 3 42\n");
        c.update(KAFKA_LOG_START_OFFSET, None).unwrap();
        assert_eq!(std::fs::read_to_string(tmp.join(KAFKA_LOG_START_OFFSET)).unwrap(), "0\n1\nother 0 5\n");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
