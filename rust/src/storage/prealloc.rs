//! The preallocation budget of a data directory: how many bytes this process may hold reserved
//! (`fallocate`d) but not yet written, summed over every active segment of every partition in
//! one data directory (the partition folder's parent).
//!
//! A segment reserves disk ahead of its writer in growing steps (`segment/writer.rs`); with thousands
//! of partitions those steps add up to disk and page cache that hold no data. The budget caps
//! the sum: each step takes what it wants from the budget, or what is left of it, and a step
//! that finds the budget spent reserves only what the append itself needs (rounded up to a
//! page), so writes never fail for lack of budget, only the reserve ahead of them shrinks.
//! A segment gives its share back as it writes into it, and all of it when it is sealed
//! (trimmed), rolled away or closed.
//!
//! The limit is `log.preallocate.budget.bytes` of the data directory's config (Kafka has
//! `log.preallocate` as a broker-wide switch; this is its bounded form), passed to
//! `Log::open` as `LogConfig::preallocate_budget_bytes`; the last `Log` opened with a value
//! sets it for the whole directory. Per process: other processes have budgets of their own.
//!
//! Thread-safe without locks on the append path: the used bytes are an atomic counter,
//! reserved with a compare-and-swap so two partitions can never both take the last bytes.
//!
//! The same kind of budget, one per process (`Reservation::faulted_ahead`), caps the pages
//! writers keep faulted in ahead of their write positions (`segment/writer.rs`): each busy
//! partition's window ahead is resident memory, so many partitions written at once would add
//! up to hundreds of MB; past the cap, a writer faults its pages in as it stores them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// The default budget per data directory and process: 256 MiB, enough for sixteen busy
/// partitions reserving in full 16 MiB steps, or 4,096 quiet ones in their first 64 KiB step.
pub const DEFAULT_BUDGET_BYTES: u64 = 256 << 20;

/// Grants are whole pages: a reserve is mapped and faulted in by the page.
const PAGE: u64 = 4096;

/// The pages this process keeps faulted in ahead of all its writers together: a busy
/// partition's window is up to 4 MiB, so eight partitions written at full speed get whole
/// windows; more share this.
pub const FAULTED_AHEAD_LIMIT: u64 = 32 << 20;

static FAULTED_AHEAD: LazyLock<Arc<Budget>> = LazyLock::new(|| Arc::new(Budget::new(FAULTED_AHEAD_LIMIT)));

/// One data directory's budget in this process.
#[derive(Debug)]
pub struct Budget {
    limit: AtomicU64,
    used: AtomicU64,
}

/// Data directories by (device, inode), so a relative path, a symlink or a trailing slash
/// all name the same budget. Weak: a budget lives while a `Log` or a segment of that
/// directory holds it, and a later one with the same inode starts afresh.
static BUDGETS: Mutex<Option<Registry>> = Mutex::new(None);

type Registry = HashMap<(u64, u64), Weak<Budget>>;

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget { limit: AtomicU64::new(limit), used: AtomicU64::new(0) }
    }

    /// The budget of the data directory holding the partition folder `partition_dir`; its
    /// limit is set to `limit` when given (else it keeps its current one, or the default for
    /// a new budget). A directory that cannot be stat'ed gets a budget of its own: the
    /// caller's next file operation reports the real problem.
    pub fn of_partition(partition_dir: &Path, limit: Option<u64>) -> Arc<Budget> {
        let data_dir = match partition_dir.parent() {
            Some(p) if p.as_os_str().is_empty() => Path::new("."),
            Some(p) => p,
            None => partition_dir,
        };
        let Some(key) = identity(data_dir) else {
            return Arc::new(Budget::new(limit.unwrap_or(DEFAULT_BUDGET_BYTES)));
        };
        // A poisoned registry only means another thread panicked while holding it; the map
        // itself is always consistent (each operation is one insert or lookup).
        let mut guard = BUDGETS.lock().unwrap_or_else(|e| e.into_inner());
        let map = guard.get_or_insert_with(HashMap::new);
        let budget = match map.get(&key).and_then(Weak::upgrade) {
            Some(b) => b,
            None => {
                // Forget directories nobody uses any more before the map grows (tests open
                // thousands of temporary directories in one process).
                if map.len() >= 64 && map.len().is_power_of_two() {
                    map.retain(|_, w| w.strong_count() > 0);
                }
                let b = Arc::new(Budget::new(DEFAULT_BUDGET_BYTES));
                map.insert(key, Arc::downgrade(&b));
                b
            }
        };
        if let Some(limit) = limit {
            budget.limit.store(limit, Ordering::Relaxed);
        }
        budget
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Bytes reserved ahead of writers now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Take up to `wanted` bytes, in whole pages: all of it while the budget lasts, what is
    /// left once it runs low, 0 when it is spent.
    fn take(&self, wanted: u64) -> u64 {
        let mut used = self.used.load(Ordering::Acquire);
        loop {
            let left = self.limit().saturating_sub(used);
            let granted = wanted.min(left) / PAGE * PAGE;
            if granted == 0 {
                return 0;
            }
            match self.used.compare_exchange_weak(used, used + granted, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return granted,
                Err(now) => used = now,
            }
        }
    }

    fn give_back(&self, bytes: u64) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
        }
    }
}

/// The (device, inode) of a directory, following symlinks.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// What one active segment holds of its data directory's budget. Found on the first
/// reservation (readers and sealed segments never look it up) and given back on drop.
#[derive(Debug, Default)]
pub struct Reservation {
    budget: Option<Arc<Budget>>,
    held: u64,
}

impl Reservation {
    /// A share of the process's budget of pages faulted in ahead of writers
    /// (`FAULTED_AHEAD_LIMIT`), instead of a data directory's preallocation budget.
    pub fn faulted_ahead() -> Reservation {
        Reservation { budget: Some(Arc::clone(&FAULTED_AHEAD)), held: 0 }
    }

    /// Reserve up to `wanted` more bytes ahead of the writer of a segment in `partition_dir`;
    /// returns the bytes granted (whole pages, possibly 0).
    pub fn take(&mut self, partition_dir: &Path, wanted: usize) -> usize {
        if wanted == 0 {
            return 0;
        }
        let budget = self.budget.get_or_insert_with(|| Budget::of_partition(partition_dir, None));
        let granted = budget.take(wanted as u64);
        self.held += granted;
        granted as usize
    }

    /// The writer has written into its reserve: keep at most `unwritten` bytes (what is still
    /// reserved and unwritten), give the rest back.
    pub fn settle(&mut self, unwritten: usize) {
        let keep = self.held.min(unwritten as u64);
        if let Some(budget) = &self.budget {
            budget.give_back(self.held - keep);
        }
        self.held = keep;
    }

    /// The segment was trimmed to its data (sealed) or is going away.
    pub fn release(&mut self) {
        self.settle(0);
    }

    pub fn held(&self) -> usize {
        self.held as usize
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_stop_at_the_limit_and_come_back_when_released() {
        let budget = Arc::new(Budget::new(10 * PAGE));
        let mut a = Reservation { budget: Some(Arc::clone(&budget)), held: 0 };
        let mut b = Reservation { budget: Some(Arc::clone(&budget)), held: 0 };
        let dir = Path::new("/nonexistent/p-0");
        assert_eq!(a.take(dir, 8 * PAGE as usize), 8 * PAGE as usize);
        // Only what is left, in whole pages.
        assert_eq!(b.take(dir, 8 * PAGE as usize), 2 * PAGE as usize);
        assert_eq!(b.take(dir, PAGE as usize), 0);
        assert_eq!(budget.used(), 10 * PAGE);
        a.settle(3 * PAGE as usize + 100);
        assert_eq!(a.held(), 3 * PAGE as usize + 100);
        assert_eq!(budget.used(), 5 * PAGE + 100);
        drop(a);
        b.release();
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn threads_never_take_more_than_the_limit() {
        let budget = Arc::new(Budget::new(1000 * PAGE));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let budget = Arc::clone(&budget);
                std::thread::spawn(move || {
                    let mut mine = Reservation { budget: Some(budget), held: 0 };
                    let mut got = 0;
                    for _ in 0..1000 {
                        got += mine.take(Path::new("x"), 3 * PAGE as usize);
                    }
                    std::mem::forget(mine);
                    got as u64
                })
            })
            .collect();
        let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 1000 * PAGE);
        assert_eq!(budget.used(), 1000 * PAGE);
    }

    #[test]
    fn one_budget_per_data_directory() {
        let root = std::env::temp_dir().join(format!("kafkalite-prealloc-{}", std::process::id()));
        std::fs::create_dir_all(root.join("a-0")).unwrap();
        let first = Budget::of_partition(&root.join("a-0"), Some(12345));
        let second = Budget::of_partition(&root.join("b-0"), None);
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(second.limit(), 12345);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
