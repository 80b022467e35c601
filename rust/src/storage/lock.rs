//! Who may write a partition, across processes. Two advisory locks (flock) in the partition
//! directory, both released by the kernel when their holder dies:
//!
//! - `.kafkalite.writers`, the presence lock: an exclusive writer holds it exclusively for its
//!   lifetime; shared writers (several producer processes) each hold it shared, except the
//!   first one in, which holds it exclusively while it recovers the partition. Whoever holds it
//!   exclusively writes who it is into the file ("pid N (exclusive)" or "pid N (shared writers)").
//! - `.kafkalite.lock`, the append lock: a shared writer takes it only around each append (a
//!   short critical section); an exclusive writer checks it is free at open and then relies on
//!   the presence lock alone (one descriptor per idle partition).
//!
//! An exclusive writer can only start when no writer of either kind is alive, and a shared writer
//! only when no exclusive writer is, so a shared writer never waits on a lock held for a lifetime.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::storage::error::{Error, IoContext, Result};

use crate::storage::files::{APPEND_LOCK_FILE, WRITERS_FILE};

/// How long a shared writer waits for another one that is recovering the partition at open.
const SHARED_OPEN_PATIENCE: Duration = Duration::from_secs(60);

/// The pauses of a bounded wait for a lock another process or thread holds, between
/// non-blocking tries: doubling from 50 µs to 20 ms (an uncontended lock costs one try, one
/// released soon is noticed soon, a long wait polls 50 times a second), the last one cut at the
/// deadline. Every such wait is paced by it: a shared writer's append lock (`WriterLock::enter`),
/// a topic delete's (`datadir`), a transactional id's coordinator lock (`transactions::lock`),
/// the data directory's checkpoint lock, a log's mutex at close (`py`) and the server's waits
/// (`server::waits`, asleep off its request workers), so no side starves another.
pub struct Backoff {
    pause: Duration,
    deadline: Option<Instant>,
}

impl Backoff {
    /// Pauses until `deadline` (None: no end).
    pub fn until(deadline: Option<Instant>) -> Backoff {
        Backoff { pause: Duration::from_micros(50), deadline }
    }
}

/// The pauses, one per failed try; none once the deadline has passed.
impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let pause = match self.deadline {
            Some(deadline) => self.pause.min(deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?),
            None => self.pause,
        };
        self.pause = (self.pause * 2).min(Duration::from_millis(20));
        Some(pause)
    }
}

/// Try `attempt` (which must not block) until it gives `Some`, or `deadline` passes (then
/// `None`), sleeping the `Backoff` pauses between tries.
pub fn retry_until<T>(deadline: Option<Instant>, mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let mut backoff = Backoff::until(deadline);
    loop {
        if let Some(done) = attempt() {
            return Some(done);
        }
        std::thread::sleep(backoff.next()?);
    }
}

/// Take `file`'s (at `path`) exclusive flock, retrying until `deadline` (`retry_until`):
/// `Ok(false)` when another holder kept it that long.
pub fn lock_exclusive_until(file: &File, path: &Path, deadline: Option<Instant>) -> Result<bool> {
    let locked = retry_until(deadline, || match file.try_lock() {
        Ok(()) => Some(Ok(())),
        Err(TryLockError::WouldBlock) => None,
        Err(TryLockError::Error(e)) => Some(Err(Error::io_at(path, format!("cannot lock {}", path.display()), e))),
    });
    Ok(locked.transpose()?.is_some())
}

fn open_lock_file(path: &Path) -> Result<File> {
    crate::storage::nofollow::open(
        crate::storage::nofollow::options().read(true).write(true).create(true),
        path,
        "lock file",
    )
}

fn read_holder(file: &File) -> String {
    let mut holder = String::new();
    let _ = (&*file).seek(SeekFrom::Start(0));
    let _ = (&*file).read_to_string(&mut holder);
    let holder = holder.trim();
    if holder.is_empty() {
        "another process".to_string()
    } else {
        holder.to_string()
    }
}

/// The pid of the process holding a flock on `file`, from the kernel's table (`/proc/locks`,
/// Linux): the append and group-state locks record nothing in their files (writing the holder at
/// every append would cost a write per batch), so a caller that gave up waiting asks the kernel
/// whom it waited for. None where the table cannot be read or no other process holds a lock.
pub fn flock_holder_pid(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let dev = rustix::fs::Dev::from(meta.dev());
    let id = format!("{:02x}:{:02x}:{}", rustix::fs::major(dev), rustix::fs::minor(dev), meta.ino());
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    let own = std::process::id();
    // "1: FLOCK  ADVISORY  WRITE 2278 fe:00:5309491 0 EOF"; waiters' lines have "->" after the number.
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"FLOCK") || fields.get(5) != Some(&id.as_str()) {
            return None;
        }
        fields.get(4)?.parse().ok().filter(|&pid| pid != own)
    })
}

/// `flock_holder_pid` in words, for a warning: "pid N" or `fallback`.
pub fn describe_holder(file: &File, fallback: impl FnOnce() -> String) -> String {
    match flock_holder_pid(file) {
        Some(pid) => format!("pid {pid}"),
        None => fallback(),
    }
}

fn write_holder(file: &File, text: &str) -> Result<()> {
    file.set_len(0)
        .and_then(|_| (&*file).seek(SeekFrom::Start(0)).map(|_| ()))
        .and_then(|_| (&*file).write_all(text.as_bytes()))
        .context(|| "cannot write lock file".to_string())
}

fn locked(dir: &Path, holder: String) -> Error {
    Error::Locked { path: dir.to_path_buf(), holder }
}

/// A writer's hold on its partition.
pub struct WriterLock {
    dir: PathBuf,
    presence: File,
    /// The append lock's file: held by shared writers only (see `exclusive`). Shared with each
    /// `AppendGuard`, which unlocks it when dropped.
    append: Option<Arc<File>>,
    shared: bool,
    /// True while this shared writer holds the presence lock exclusively (it was alone at open).
    alone: bool,
}

impl WriterLock {
    /// The only writer: fails at once with `Error::Locked` if any writer is alive.
    pub fn exclusive(dir: &Path) -> Result<WriterLock> {
        let presence = open_lock_file(&dir.join(WRITERS_FILE))?;
        let append = open_lock_file(&dir.join(APPEND_LOCK_FILE))?;
        match presence.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(locked(dir, read_holder(&presence))),
            Err(TryLockError::Error(e)) => return Err(Error::io(format!("cannot lock {}", dir.display()), e)),
        }
        write_holder(&presence, &format!("pid {} (exclusive)", std::process::id()))?;
        match append.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(locked(dir, read_holder(&presence))),
            Err(TryLockError::Error(e)) => return Err(Error::io(format!("cannot lock {}", dir.display()), e)),
        }
        // The append lock was free (no deleter is renaming the directory away right now); it is
        // not kept: the exclusive presence lock already keeps every other writer out, and a
        // deleter that sees "(exclusive)" proceeds without it anyway (admin.py `_append_lock`).
        // Closing it makes an idle exclusive partition cost one descriptor, not two.
        drop(append);
        Ok(WriterLock { dir: dir.to_path_buf(), presence, append: None, shared: false, alone: true })
    }

    /// One of several writers. `alone()` tells whether no other writer was alive at open (then
    /// the caller recovers the partition before calling `share()`).
    pub fn shared(dir: &Path) -> Result<WriterLock> {
        let presence = open_lock_file(&dir.join(WRITERS_FILE))?;
        let append = open_lock_file(&dir.join(APPEND_LOCK_FILE))?;
        let started = Instant::now();
        let mut exclusive_sightings = 0;
        let alone = loop {
            match presence.try_lock() {
                Ok(()) => {
                    write_holder(&presence, &format!("pid {} (shared writers)", std::process::id()))?;
                    break true;
                }
                Err(TryLockError::Error(e)) => return Err(Error::io(format!("cannot lock {}", dir.display()), e)),
                Err(TryLockError::WouldBlock) => {}
            }
            match presence.try_lock_shared() {
                Ok(()) => break false,
                Err(TryLockError::Error(e)) => return Err(Error::io(format!("cannot lock {}", dir.display()), e)),
                Err(TryLockError::WouldBlock) => {
                    // Held exclusively: by an exclusive writer (give up), or for a moment by the
                    // first shared writer while it recovers the partition (wait for it). The text
                    // can be stale for the instant after a new holder locks, so look again
                    // before believing "exclusive".
                    let holder = read_holder(&presence);
                    if holder.contains("(exclusive)") {
                        exclusive_sightings += 1;
                    }
                    if exclusive_sightings > 20 || started.elapsed() > SHARED_OPEN_PATIENCE {
                        return Err(locked(dir, holder));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        };
        let lock = WriterLock { dir: dir.to_path_buf(), presence, append: Some(Arc::new(append)), shared: true, alone };
        Ok(lock)
    }

    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Whether this writer held the partition alone when it checked (exclusive writers always do).
    pub fn alone(&self) -> bool {
        self.alone
    }

    /// A shared writer that opened alone lets others in (presence lock exclusive -> shared).
    pub fn share(&mut self) -> Result<()> {
        if self.shared && self.alone {
            self.presence.lock_shared().context(|| format!("cannot lock {}", self.dir.display()))?;
            self.alone = false;
        }
        Ok(())
    }

    /// Shared writers: wait for the append lock (other shared writers hold it only briefly),
    /// until `deadline` at most: a writer that is stopped (SIGSTOP) or hung while holding it
    /// must not block this one forever. Polls `try_enter`, paced by `Backoff`. The lock is held
    /// until the returned guard is dropped, so every way out of the critical section (`?`, early
    /// return, panic) releases it.
    /// (An exclusive writer's guard holds nothing: its presence lock already keeps others out.)
    #[must_use = "the append lock is released when the guard is dropped"]
    pub fn enter(&self, deadline: Option<Instant>) -> Result<AppendGuard> {
        let started = Instant::now();
        retry_until(deadline, || self.try_enter().transpose()).unwrap_or_else(|| {
            Err(Error::LockTimeout {
                path: self.dir.clone(),
                waited_ms: started.elapsed().as_millis() as u64,
                holder: read_holder(&self.presence),
            })
        })
    }

    /// Shared writers: take the append lock only if it is free now (`Ok(None)` when another
    /// writer holds it), for a caller that waits elsewhere, with backoff, between tries.
    #[must_use = "the append lock is released when the guard is dropped"]
    pub fn try_enter(&self) -> Result<Option<AppendGuard>> {
        let Some(append) = self.append.as_ref() else { return Ok(Some(AppendGuard { append: None })) };
        match append.try_lock() {
            Ok(()) => Ok(Some(AppendGuard { append: Some(Arc::clone(append)) })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(Error::io(format!("cannot lock {}", self.dir.display()), e)),
        }
    }

    /// Who holds the append lock, for a warning after a wait ran out: the holder's pid from the
    /// kernel, else what the presence lock's file says about the writers.
    pub fn append_holder(&self) -> String {
        match self.append.as_deref() {
            Some(append) => describe_holder(append, || read_holder(&self.presence)),
            None => read_holder(&self.presence),
        }
    }

    /// At close: true if no other writer is alive (this one then finishes the partition).
    /// A shared writer tries to take the presence lock exclusively; either way it is leaving.
    pub fn last_one_out(&mut self) -> bool {
        if !self.shared || self.alone {
            return true;
        }
        self.alone = self.presence.try_lock().is_ok();
        if self.alone {
            let _ = write_holder(&self.presence, &format!("pid {} (shared writers)", std::process::id()));
        }
        self.alone
    }
}

/// A held append lock (`WriterLock::enter`); dropping it releases the lock. It owns a handle on
/// the lock file rather than borrowing the `WriterLock`, so the writer can change its log
/// (which owns the `WriterLock`) while it holds the lock.
#[derive(Debug)]
pub struct AppendGuard {
    append: Option<Arc<File>>,
}

impl Drop for AppendGuard {
    fn drop(&mut self) {
        if let Some(append) = self.append.take() {
            // Unlock fails only on a bad descriptor; closing the file (when the writer closes)
            // would release the lock anyway.
            let _ = append.unlock();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_20_ms_and_ends_at_its_deadline() {
        let pauses: Vec<u64> = Backoff::until(None).take(12).map(|p| p.as_micros() as u64).collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000, 20000]);
        let deadline = Instant::now() + Duration::from_millis(2);
        let mut total = Duration::ZERO;
        for pause in Backoff::until(Some(deadline)) {
            std::thread::sleep(pause);
            total += pause;
        }
        // Each pause is cut at what is left, so together they never run past the deadline.
        assert!(Instant::now() >= deadline && total <= Duration::from_millis(2), "{total:?}");
    }

    #[test]
    fn retry_until_stops_at_the_deadline_or_the_first_success() {
        let started = Instant::now();
        assert_eq!(retry_until(Some(started + Duration::from_millis(30)), || None::<()>), None);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(30) && waited < Duration::from_secs(2), "waited {waited:?}");
        let mut tries = 0;
        let third = retry_until(None, || {
            tries += 1;
            (tries == 3).then_some(tries)
        });
        assert_eq!(third, Some(3));
    }

    /// A holder (another open file description: flocks conflict within one process too) that
    /// lets go while the other side waits, and one that does not.
    #[test]
    fn lock_exclusive_until_waits_for_a_holder_then_gives_up_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let holder = open_lock_file(&path).unwrap();
        holder.lock().unwrap();
        let waiter = open_lock_file(&path).unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(!lock_exclusive_until(&waiter, &path, Some(deadline)).unwrap());
        assert!(Instant::now() >= deadline);
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(holder);
        });
        let started = Instant::now();
        assert!(lock_exclusive_until(&waiter, &path, Some(started + Duration::from_secs(10))).unwrap());
        assert!(started.elapsed() < Duration::from_secs(5), "noticed the release late: {:?}", started.elapsed());
        release.join().unwrap();
    }
}
