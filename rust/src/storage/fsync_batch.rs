//! Fsync batching (group commit) for `flush="always"` (`acks='all'`), across the threads of a
//! process and the processes writing one partition: one msync covers every batch appended before
//! it started, whoever appended it, instead of one msync per batch under the append lock.
//!
//! State lives in `.kafkalite-durable` in the partition directory, a small file every writer
//! maps (`MAP_SHARED`), so all processes see one copy:
//!
//! - *appended* (segment base, end position): written by the appender, under the append lock,
//!   after its batch is stored in the map. Every byte below it is in the page cache.
//! - *durable* (segment base, end position): written by a syncer, under the sync lock (an
//!   `flock` on the same file), only after an msync of that segment up to the end it names
//!   returned success. It is never moved for bytes a sync did not cover: a syncer reads
//!   *appended* before it syncs, and a syncer killed (or failing) before its msync returned
//!   publishes nothing.
//!
//! Each pair is a seqlock (a sequence word odd while written; one writer at a time, by the lock
//! that guards it). A writer killed mid-store leaves the word odd; the next writer rewrites the
//! pair, and a reader that cannot get a stable copy treats the watermark as unknown (it syncs
//! itself rather than believe it).
//!
//! An appender that must be durable keeps a `Ticket` (its segment, its end, its map) and calls
//! `make_durable` after leaving the append lock, so other writers keep appending while it
//! waits: covered already (the durable watermark is past it), or it waits for the sync running
//! in its process (a condition variable), or it becomes the syncer: takes the sync lock, reads
//! *appended*, msyncs from the durable watermark to there, publishes it and wakes the others.
//! A ticket whose segment was rolled away is made durable by an fdatasync of its own segment
//! file (the watermark names the newer one; `sync_segment_file`). A waiter that must not
//! block (the server's, on an async runtime) asks `Ticket::poll_turn` instead: durable, or its
//! turn to sync (`SyncTurn`, run on a thread that may block), or, while a sync of its process runs, woken when that sync ends,
//! holding no thread meanwhile. A failed msync poisons the partition's group commit in this
//! process: every waiter and every later append fails (Linux may drop the failed pages, so a
//! retried msync could succeed without the data).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::DURABLE_FILE;
use crate::storage::mmap::MappedFile;

const FILE_LEN: usize = 4096;
/// Word offsets (bytes) of the two seqlocked pairs: (sequence, segment base, end position).
/// Each pair has its own cache line.
const APPENDED: usize = 0;
const DURABLE: usize = 64;
/// A segment base no segment has: "nothing is known durable".
const NO_SEGMENT: i64 = -1;
/// Longest pause between two tries for another process's sync lock.
const MAX_PAUSE: Duration = Duration::from_millis(1);

/// One partition's group-commit state, shared by the writers of one `Log` and their tickets.
pub struct GroupCommit {
    dir: PathBuf,
    /// Its `flock` is the sync lock between processes (one syncer at a time per partition).
    file: File,
    map: Arc<MappedFile>,
    local: Mutex<Local>,
    /// Signalled when a sync of this process ends.
    turn: Condvar,
}

struct Local {
    /// A thread of this process is syncing: the others wait for it, then look again.
    syncing: bool,
    /// A sync failed: nothing of this partition is acknowledged by this writer any more.
    failed: Option<String>,
    /// Async waiters (`Ticket::poll_turn`) to wake, with the threads, when a sync ends.
    wakers: Vec<Waker>,
}

/// What one append waits for: its segment durable up to `end`.
#[derive(Clone)]
pub struct Ticket {
    group: Arc<GroupCommit>,
    base: i64,
    end: usize,
    /// The segment's map, kept so the ticket can still be synced after a roll.
    map: Arc<MappedFile>,
    path: PathBuf,
}

impl Ticket {
    pub fn new(group: &Arc<GroupCommit>, base: i64, end: usize, map: Arc<MappedFile>, path: PathBuf) -> Ticket {
        Ticket { group: Arc::clone(group), base, end, map, path }
    }

    /// Whether `other` is waited for by waiting for this one (same partition state, same
    /// segment, and this one ends at or past it).
    pub fn covers(&self, other: &Ticket) -> bool {
        Arc::ptr_eq(&self.group, &other.group) && self.base == other.base && self.end >= other.end
    }

    /// Whether both belong to the same partition writer and segment.
    pub fn same_segment(&self, other: &Ticket) -> bool {
        Arc::ptr_eq(&self.group, &other.group) && self.base == other.base
    }

    /// Wait until the ticket's bytes are durable (see the module comment); `deadline` bounds the
    /// wait for a sync another thread or process is running.
    pub fn wait(&self, deadline: Option<Instant>) -> Result<()> {
        self.group.make_durable(self, deadline)
    }

    /// `wait` for a caller that must not block: `Ready(Durable)` once the ticket's bytes are
    /// durable, `Ready(Sync)` when no sync of this process runs (the caller now runs one:
    /// `SyncTurn::sync`, on a thread that may block), an error once a sync failed, and
    /// `Pending` while another sync of this process runs (`cx` is woken when it ends).
    pub fn poll_turn(&self, cx: &mut Context<'_>) -> Poll<Result<Turn>> {
        let mut local = match self.group.local() {
            Ok(local) => local,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if let Some(why) = &local.failed {
            return Poll::Ready(Err(Error::Poisoned(why.clone())));
        }
        if self.group.covered(self) {
            return Poll::Ready(Ok(Turn::Durable));
        }
        if !local.syncing {
            local.syncing = true;
            return Poll::Ready(Ok(Turn::Sync(SyncTurn {
                ticket: self.clone(),
                claimed: Instant::now(),
                armed: true,
            })));
        }
        if !local.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            local.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The error of a wait for this ticket that ran out at its deadline (started at `started`).
    pub fn timed_out(&self, started: Instant) -> Error {
        self.group.timeout(started)
    }
}

/// What `Ticket::poll_turn` found.
pub enum Turn {
    /// The ticket's bytes are durable.
    Durable,
    /// This waiter syncs for its process now.
    Sync(SyncTurn),
}

/// A waiter's claim on its process's sync of a partition: others wait for it (threads and async
/// waiters alike) until it is run (`sync`) or dropped.
pub struct SyncTurn {
    ticket: Ticket,
    claimed: Instant,
    /// Not run yet: dropping it hands the turn on.
    armed: bool,
}

impl SyncTurn {
    /// Sync what was appended until now, covering the ticket (blocks: the msync, and the wait
    /// for another process's sync lock until `deadline`), then wake the others.
    pub fn sync(mut self, deadline: Option<Instant>) -> Result<()> {
        self.armed = false;
        self.ticket.group.run_sync(&self.ticket, deadline, self.claimed)
    }
}

impl Drop for SyncTurn {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(mut local) = self.ticket.group.local() {
                local.syncing = false;
                self.ticket.group.wake(&mut local);
            }
        }
    }
}

impl GroupCommit {
    /// Open (creating) the partition's group-commit file.
    pub fn open(dir: &Path) -> Result<Arc<GroupCommit>> {
        let path = dir.join(DURABLE_FILE);
        let file = crate::storage::nofollow::open(
            crate::storage::nofollow::options().read(true).write(true).create(true),
            &path,
            "group-commit file",
        )?;
        let len = file.metadata().context(|| format!("cannot stat {}", path.display()))?.len() as usize;
        if len < FILE_LEN {
            // Real blocks for the page (a store to a hole past the end would raise SIGBUS), written
            // only past what exists so the state of live writers is kept.
            file.write_all_at(&vec![0u8; FILE_LEN - len], len as u64)
                .context(|| format!("cannot write {}", path.display()))?;
        }
        let map = MappedFile::writable(&file, FILE_LEN, &path.display().to_string())?;
        let group = GroupCommit {
            dir: dir.to_path_buf(),
            file,
            map,
            local: Mutex::new(Local { syncing: false, failed: None, wakers: Vec::new() }),
            turn: Condvar::new(),
        };
        Ok(Arc::new(group))
    }

    /// The only writer, after recovering the partition at open (it holds every lock, nobody
    /// else is alive): the recovered end is appended, and nothing is known durable yet.
    pub fn reset(&self, base: i64, end: usize) {
        self.store(APPENDED, base, end as u64);
        self.store(DURABLE, NO_SEGMENT, 0);
    }

    /// Under the append lock, after a batch was stored: every byte of segment `base` below
    /// `end` is in the page cache.
    pub fn appended(&self, base: i64, end: usize) {
        self.store(APPENDED, base, end as u64);
    }

    /// Why this writer acknowledges nothing any more, if a sync failed.
    pub fn failure(&self) -> Option<String> {
        self.local.lock().ok().and_then(|l| l.failed.clone())
    }

    fn covered(&self, t: &Ticket) -> bool {
        matches!(self.load(DURABLE), Some((base, end)) if base == t.base && end >= t.end as u64)
    }

    fn local(&self) -> Result<MutexGuard<'_, Local>> {
        self.local.lock().map_err(|_| Error::Poisoned("group commit state poisoned".into()))
    }

    fn make_durable(&self, t: &Ticket, deadline: Option<Instant>) -> Result<()> {
        let started = Instant::now();
        let mut local = self.local()?;
        loop {
            if let Some(why) = &local.failed {
                return Err(Error::Poisoned(why.clone()));
            }
            if self.covered(t) {
                return Ok(());
            }
            if !local.syncing {
                break;
            }
            // Another thread of this process syncs now; its sync may cover this ticket.
            let wait = deadline.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(Instant::now()));
            if wait.is_zero() {
                return Err(self.timeout(started));
            }
            local = self.turn.wait_timeout(local, wait).map_err(|_| Error::Poisoned("group commit poisoned".into()))?.0;
        }
        local.syncing = true;
        drop(local);
        self.run_sync(t, deadline, started)
    }

    /// This thread claimed its process's sync (`syncing`): run it, then let the others look again.
    fn run_sync(&self, t: &Ticket, deadline: Option<Instant>, started: Instant) -> Result<()> {
        let result = self.sync_round(t, deadline, started);
        let mut local = self.local()?;
        local.syncing = false;
        if let Err(e) = &result {
            if !matches!(e, Error::LockTimeout { .. }) {
                local.failed = Some(e.to_string());
            }
        }
        self.wake(&mut local);
        // Every waiter of a failed sync sees the same poisoned-writer error (a timeout is not a failure).
        result.map_err(|e| if matches!(e, Error::LockTimeout { .. }) { e } else { Error::Poisoned(e.to_string()) })
    }

    /// A sync ended: the waiting threads and async waiters look again.
    fn wake(&self, local: &mut Local) {
        self.turn.notify_all();
        for waker in local.wakers.drain(..) {
            waker.wake();
        }
    }

    /// This thread is the syncer of its process: take the sync lock, and msync what was
    /// appended until then.
    fn sync_round(&self, t: &Ticket, deadline: Option<Instant>, started: Instant) -> Result<()> {
        let _sync = self.lock_sync(deadline, started)?;
        if self.covered(t) {
            return Ok(()); // another process's sync covered it while we waited for the lock
        }
        let appended = self.load(APPENDED);
        let durable = self.load(DURABLE);
        let what = || format!("cannot make {} durable", t.path.display());
        crate::storage::failpoint::hit("group_commit.sync").context(what)?;
        match appended {
            Some((base, end)) if base == t.base && end >= t.end as u64 => {
                // Our segment is the one being appended to: sync from the watermark (or the
                // segment's start) to the end appended so far, and publish that end.
                let from = match durable {
                    Some((b, e)) if b == base => (e as usize).min(end as usize),
                    _ => 0,
                };
                self.msync(t, from, end as usize)?;
                crate::storage::failpoint::hit("group_commit.publish").context(what)?;
                self.store(DURABLE, base, end);
            }
            _ => {
                // The segment was rolled away (the watermark names a newer one), or the state
                // cannot be read: sync the ticket's own segment; publish nothing.
                sync_segment_file(t)?;
            }
        }
        Ok(())
    }

    /// Sync `[from, to)` of the ticket's segment: every byte below `to` was appended (the
    /// appended watermark, or the ticket's own end, which appends only move past).
    fn msync(&self, t: &Ticket, from: usize, to: usize) -> Result<()> {
        if !t.map.is_writable() {
            return sync_segment_file(t); // an msync through it would write nothing back
        }
        t.map.sync_appended(from, to).map_err(|e| Error::Poisoned(format!("msync of {} failed: {e}", t.path.display())))
    }

    /// The sync lock (`flock` on the file), polled with a short backoff until `deadline`: a
    /// syncer that is stopped must not hold the others forever; one that died released it.
    fn lock_sync(&self, deadline: Option<Instant>, started: Instant) -> Result<SyncGuard<'_>> {
        let mut pause = Duration::from_micros(20);
        loop {
            match self.file.try_lock() {
                Ok(()) => return Ok(SyncGuard { file: &self.file }),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::io(format!("cannot lock {}", self.dir.join(DURABLE_FILE).display()), e))
                }
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(self.timeout(started));
            }
            std::thread::sleep(deadline.map_or(pause, |d| pause.min(d - now)));
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    fn timeout(&self, started: Instant) -> Error {
        Error::LockTimeout {
            path: self.dir.clone(),
            waited_ms: started.elapsed().as_millis() as u64,
            holder: "another writer's sync (is a writer stopped?)".into(),
        }
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        self.map.atomic_u64(at)
    }

    /// Seqlock store; callers hold the lock that makes them the pair's only writer.
    fn store(&self, at: usize, base: i64, end: u64) {
        let seq = self.word(at);
        // Odd while writing (it may be odd already: a writer killed mid-store).
        let odd = seq.load(Ordering::Relaxed) | 1;
        seq.store(odd, Ordering::Relaxed);
        fence(Ordering::Release);
        self.word(at + 8).store(base as u64, Ordering::Relaxed);
        self.word(at + 16).store(end, Ordering::Relaxed);
        seq.store(odd.wrapping_add(1), Ordering::Release);
    }

    /// Seqlock load: None when no stable copy was seen (a writer is storing, or died doing so).
    fn load(&self, at: usize) -> Option<(i64, u64)> {
        let seq = self.word(at);
        for _ in 0..100 {
            let before = seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let base = self.word(at + 8).load(Ordering::Relaxed) as i64;
                let end = self.word(at + 16).load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if seq.load(Ordering::Relaxed) == before {
                    return Some((base, end));
                }
            }
            std::hint::spin_loop();
        }
        None
    }
}

/// The held sync lock; released when dropped (or by the kernel when the process dies).
struct SyncGuard<'a> {
    file: &'a File,
}

impl Drop for SyncGuard<'_> {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Reset the group-commit state of a partition this writer recovered alone, if the file exists
/// (a writer that does not sync never creates it).
pub fn reset_if_present(dir: &Path, base: i64, end: usize) -> Result<()> {
    if std::fs::symlink_metadata(dir.join(DURABLE_FILE)).is_ok() {
        GroupCommit::open(dir)?.reset(base, end);
    }
    Ok(())
}

/// Make a ticket's segment durable through its file, not through the ticket's map: for a
/// segment rolled away, and for one mapped read-only (a segment the log found sealed, at open or
/// while following another writer's roll), whose map an msync cannot write back
/// (`MappedFile::is_writable`: seen leaving another writer's dirty pages dirty). The whole file
/// is synced. A segment deleted since (retention, DeleteRecords) has nothing left to make
/// durable.
fn sync_segment_file(t: &Ticket) -> Result<()> {
    let file = match crate::storage::nofollow::open_read(&t.path, "segment") {
        Ok(file) => file,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::Poisoned(format!("cannot sync {}: {e}", t.path.display()))),
    };
    file.sync_data().map_err(|e| Error::Poisoned(format!("fdatasync of {} failed: {e}", t.path.display())))
}

/// Wait for many tickets at once: one wait per partition segment (for its furthest ticket), the
/// partitions in parallel so their syncs overlap (the file system commits concurrent syncs
/// together). Returns one result per ticket, in order.
pub fn wait_all(tickets: &[Ticket], deadline: Option<Instant>) -> Vec<Result<()>> {
    let mut heads: Vec<&Ticket> = Vec::new();
    for t in tickets {
        match heads.iter_mut().find(|h| h.same_segment(t)) {
            Some(h) if t.end > h.end => *h = t,
            Some(_) => {}
            None => heads.push(t),
        }
    }
    let outcomes: Vec<Result<()>> = match heads.split_first() {
        // No ticket (a transaction that appended nothing): nothing to wait for.
        None => Vec::new(),
        Some((first, [])) => vec![first.wait(deadline)],
        Some((first, rest)) => std::thread::scope(|s| {
            // The other partitions wait on threads of their own, the first on this one: a thread
            // fewer to start (and unmap) per group.
            let handles: Vec<_> = rest.iter().map(|h| s.spawn(move || h.wait(deadline))).collect();
            let first = first.wait(deadline);
            let others = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| Err(Error::Poisoned(crate::storage::log::panic_message(&*p)))));
            std::iter::once(first).chain(others).collect()
        }),
    };
    tickets
        .iter()
        .map(|t| {
            let i = heads.iter().position(|h| h.covers(t)).expect("every ticket has a head");
            match &outcomes[i] {
                Ok(()) => Ok(()),
                Err(e) => Err(copy_error(e)),
            }
        })
        .collect()
}

/// The error of one partition's wait, for each of its tickets (`Error` is not `Clone`: it holds
/// `io::Error`s). A timeout stays a timeout; anything else failed the sync, which poisons.
fn copy_error(e: &Error) -> Error {
    match e {
        Error::LockTimeout { path, waited_ms, holder } => {
            Error::LockTimeout { path: path.clone(), waited_ms: *waited_ms, holder: holder.clone() }
        }
        Error::Poisoned(why) => Error::Poisoned(why.clone()),
        other => Error::Poisoned(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(dir: &Path, len: usize) -> (Arc<MappedFile>, PathBuf) {
        let path = dir.join("00000000000000000000.log");
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.set_len(len as u64).unwrap();
        (MappedFile::writable(&file, len, "segment").unwrap(), path)
    }

    #[test]
    fn a_sync_publishes_what_was_appended_before_it_and_covers_later_waiters() {
        let dir = tempfile::tempdir().unwrap();
        let group = GroupCommit::open(dir.path()).unwrap();
        group.reset(0, 0);
        let (map, path) = segment(dir.path(), 8192);
        let first = Ticket::new(&group, 0, 100, Arc::clone(&map), path.clone());
        group.appended(0, 100);
        group.appended(0, 300); // another writer appended meanwhile
        let second = Ticket::new(&group, 0, 300, map, path);
        assert!(!group.covered(&first));
        first.wait(None).unwrap();
        assert_eq!(group.load(DURABLE), Some((0, 300)), "the sync covers everything appended before it");
        assert!(group.covered(&second), "a later waiter needs no sync of its own");
        // Another process opening the same file sees the same watermark.
        let other = GroupCommit::open(dir.path()).unwrap();
        assert_eq!(other.load(DURABLE), Some((0, 300)));
    }

    #[test]
    fn a_writer_killed_mid_store_leaves_no_watermark_to_trust() {
        let dir = tempfile::tempdir().unwrap();
        let group = GroupCommit::open(dir.path()).unwrap();
        group.reset(0, 0);
        group.store(DURABLE, 0, 4096);
        // A writer died between its two sequence stores: the word stays odd.
        group.word(DURABLE).fetch_or(1, Ordering::SeqCst);
        let (map, path) = segment(dir.path(), 8192);
        let ticket = Ticket::new(&group, 0, 200, map, path);
        assert_eq!(group.load(DURABLE), None);
        assert!(!group.covered(&ticket), "a torn watermark covers nothing");
        group.appended(0, 200);
        ticket.wait(None).unwrap(); // syncs itself, then publishes a whole pair again
        assert_eq!(group.load(DURABLE), Some((0, 200)));
    }

    #[test]
    fn a_ticket_of_a_rolled_segment_syncs_its_own_bytes_and_publishes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let group = GroupCommit::open(dir.path()).unwrap();
        group.reset(0, 0);
        let (map, path) = segment(dir.path(), 8192);
        let old = Ticket::new(&group, 0, 500, map, path);
        group.appended(40, 64); // the partition rolled to segment 40 since
        old.wait(None).unwrap();
        assert_eq!(group.load(DURABLE), Some((NO_SEGMENT, 0)), "nothing of segment 40 was synced");
    }

    /// A waker that counts its wake-ups.
    struct Counter(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll(ticket: &Ticket, waker: &Arc<Counter>) -> Poll<Result<Turn>> {
        let waker = Waker::from(Arc::clone(waker));
        ticket.poll_turn(&mut Context::from_waker(&waker))
    }

    #[test]
    fn an_async_waiter_holds_no_thread_while_another_syncs_and_is_woken_covered() {
        let dir = tempfile::tempdir().unwrap();
        let group = GroupCommit::open(dir.path()).unwrap();
        group.reset(0, 0);
        let (map, path) = segment(dir.path(), 8192);
        group.appended(0, 100);
        let first = Ticket::new(&group, 0, 100, Arc::clone(&map), path.clone());
        group.appended(0, 300);
        let second = Ticket::new(&group, 0, 300, map, path);
        let (a, b) = (Arc::new(Counter(0.into())), Arc::new(Counter(0.into())));
        let Poll::Ready(Ok(Turn::Sync(turn))) = poll(&first, &a) else {
            panic!("nobody syncs: the first waiter's turn")
        };
        assert!(matches!(poll(&second, &b), Poll::Pending), "a sync of this process runs: wait for it");
        assert!(matches!(poll(&second, &b), Poll::Pending));
        // A thread's wait (`Ticket::wait`) queues behind the claimed turn too.
        let waiting = std::thread::spawn({
            let second = second.clone();
            move || second.wait(Some(Instant::now() + Duration::from_secs(30)))
        });
        assert_eq!(b.0.load(Ordering::SeqCst), 0);
        turn.sync(None).unwrap();
        assert_eq!(b.0.load(Ordering::SeqCst), 1, "woken once when the sync ended, however often it polled");
        assert!(
            matches!(poll(&second, &b), Poll::Ready(Ok(Turn::Durable))),
            "the sync covered what was appended before it"
        );
        waiting.join().unwrap().unwrap();
        assert_eq!(group.load(DURABLE), Some((0, 300)));
    }

    #[test]
    fn a_turn_dropped_without_its_sync_hands_the_turn_on() {
        let dir = tempfile::tempdir().unwrap();
        let group = GroupCommit::open(dir.path()).unwrap();
        group.reset(0, 0);
        let (map, path) = segment(dir.path(), 8192);
        group.appended(0, 100);
        let ticket = Ticket::new(&group, 0, 100, map, path);
        let (a, b) = (Arc::new(Counter(0.into())), Arc::new(Counter(0.into())));
        let Poll::Ready(Ok(Turn::Sync(turn))) = poll(&ticket, &a) else { panic!("the first waiter's turn") };
        assert!(matches!(poll(&ticket, &b), Poll::Pending));
        drop(turn); // its request went away before it synced
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        let Poll::Ready(Ok(Turn::Sync(turn))) = poll(&ticket, &b) else { panic!("the turn was not handed on") };
        turn.sync(None).unwrap();
        assert!(matches!(poll(&ticket, &a), Poll::Ready(Ok(Turn::Durable))));
    }

    #[test]
    fn waiting_for_no_tickets_waits_for_nothing() {
        // A transaction that appended nothing under acks='all' (an empty commit) has no ticket.
        assert!(wait_all(&[], None).is_empty());
    }
}
