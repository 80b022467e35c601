//! Cross-process wake-ups for consumers: a 32-bit counter at the start of a small shared file
//! (`.kafkalite-notify` in the data directory). A producer bumps it after appending and wakes
//! every waiter with FUTEX_WAKE; a caught-up consumer sleeps in FUTEX_WAIT until the counter
//! moves past the value it last saw, or its timeout ends. No polling, no busy spinning.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::thread::futex;

use crate::storage::error::{IoContext, Result};
use crate::storage::mmap::MappedFile;

/// The notify file's size; a reader (Python's `wakeup.py`, through `_native.NOTIFY_FILE_LEN`)
/// only maps a file of exactly this size, since opening a shorter one would extend it.
pub const FILE_LEN: usize = 4096;

pub struct Notifier {
    map: Arc<MappedFile>,
}

impl Notifier {
    /// Open (creating) the notifier file at `path`.
    pub fn open(path: &Path) -> Result<Notifier> {
        let file = crate::storage::nofollow::open(
            crate::storage::nofollow::options().read(true).write(true).create(true),
            path,
            "wake-up file",
        )?;
        let len = file.metadata().context(|| format!("cannot stat {}", path.display()))?.len() as usize;
        if len < FILE_LEN {
            // Real blocks for the page, written only past what exists so a live counter is kept.
            file.write_all_at(&vec![0u8; FILE_LEN - len], len as u64)
                .context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(Notifier { map: MappedFile::writable(&file, FILE_LEN, &path.display().to_string())? })
    }

    fn word(&self) -> &AtomicU32 {
        self.map.atomic_u32(0)
    }

    /// The current counter: read it before checking for data, then `wait` on it.
    pub fn sequence(&self) -> u32 {
        self.word().load(Ordering::SeqCst)
    }

    /// Announce new data to every waiter in every process.
    pub fn notify(&self) {
        self.word().fetch_add(1, Ordering::SeqCst);
        let _ = futex::wake(self.word(), futex::Flags::empty(), i32::MAX as u32);
    }

    /// Sleep until the counter differs from `seen` or `timeout` passes. Returns true if it moved.
    pub fn wait(&self, seen: u32, timeout: Duration) -> bool {
        let ts = rustix::time::Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: timeout.subsec_nanos() as i64 };
        if self.sequence() != seen {
            return true;
        }
        let _ = futex::wait(self.word(), futex::Flags::empty(), seen, Some(&ts));
        self.sequence() != seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_a_waiter_in_another_thread_quickly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let a = Notifier::open(&path).unwrap();
        let b = Notifier::open(&path).unwrap();
        let seen = b.sequence();
        let started = std::time::Instant::now();
        let waiter = std::thread::spawn(move || (b.wait(seen, Duration::from_secs(5)), started.elapsed()));
        std::thread::sleep(Duration::from_millis(50));
        a.notify();
        let (moved, waited) = waiter.join().unwrap();
        assert!(moved);
        assert!(waited < Duration::from_secs(2), "woke after {waited:?}");
        assert!(!a.wait(a.sequence(), Duration::from_millis(10)), "times out when nothing moves");
    }
}
