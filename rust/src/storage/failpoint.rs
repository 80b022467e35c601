//! Named fail points for fault-injection tests: a step of the engine that can be made to fail
//! or to kill the process, chosen at run time by an environment variable.
//!
//! `KAFKALITE_FAILPOINTS="name=action[,name=action...]"`, read once per process, where action
//! is `kill` (SIGKILL this process), `enospc`, `emfile` or `eio` (the step returns that I/O
//! error), `panic` (the step panics, as a bug would: what poisoned-lock handling guards
//! against) or `stop` (SIGSTOP this process, then go on with the step once continued: a test
//! waits for the stop, changes the files as another process would at that moment, and sends
//! SIGCONT), optionally suffixed `@N` to fire only on the N-th hit of that point (1-based).
//! Unset, a check is one `OnceLock` load of `None`: nothing on the hot path.
//!
//! Every point the engine checks is listed in `NAMES`, so a fault suite can enumerate them
//! (`kafkalite._native.failpoint_names()`); an unknown name in the variable is reported on
//! stderr once and ignored.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Every fail point, in the order the steps run.
pub const NAMES: &[&str] = &[
    // Log::roll_locked: seal the active segment, then create the next one.
    "roll.before_seal",
    "roll.after_seal",
    "roll.after_create",
    // Segment::create: the .log file, its indexes, the first block reservation.
    "segment.create.log",
    "segment.create.index",
    "segment.create.timeindex",
    "segment.reserve",
    // IndexFile::push: one offset- or time-index entry written after its batch was published.
    "index.append",
    // log::generation::bump: the segment generation moved, before and again after segments are
    // deleted or replaced (retention, DeleteRecords, the cleaner's swap, recovery at open).
    "segments.generation",
    // Log::follow_files: a reader (or shared writer) about to open a segment its directory
    // listing showed, one hit per segment (where retention may have deleted it since).
    "follow.open_segment",
    // Segment::seal: trimming the file to its valid length.
    "segment.seal.trim",
    // Log::close on the last writer: seal, sync, then the clean-shutdown marker.
    "shutdown.before_marker",
    "shutdown.after_marker",
    // producer_state::write_snapshot: a producer snapshot (at roll, at clean close) is written.
    "producer_snapshot.write",
    // checkpoint::write_atomically (and write_private_atomically: the users file): the temp file,
    // the rename, the directory sync.
    "checkpoint.write",
    "checkpoint.rename",
    // The topic metadata (datadir/journal.rs, metadata_file.rs): a journal entry about to be
    // appended, half of it written, written whole before its sync; a compaction's new snapshot
    // about to be written, and written (renamed in) before the journal is replaced.
    "topics.journal.append",
    "topics.journal.mid_entry",
    "topics.journal.sync",
    "topics.snapshot.write",
    "topics.snapshot.written",
    // KafkaCheckpoints::update: a data directory's shared Kafka checkpoint file rewritten.
    "kafka_checkpoint.update",
    // checkpoint::sync_dir: every directory fsync (new segments under flush="always", renames).
    "dir.sync",
    // GroupCommit::sync_round (flush="always"): before the syncer's msync, and after it,
    // before the durable watermark is published.
    "group_commit.sync",
    "group_commit.publish",
    // Cleaner swap of a group of segments (cleaner::replace_group): X.log.cleaned written,
    // renamed to X.log.swap (commit), X's indexes removed, X.log replaced by the new file, each
    // other old segment deleted (one hit per segment), the swap name removed.
    "cleaner.write_cleaned",
    "cleaner.rename_swap",
    "cleaner.remove_indexes",
    "cleaner.replace_log",
    "cleaner.delete_old",
    "cleaner.remove_swap",
    // Accumulator::send (the producer binding): a record being added to its partition's batch,
    // with the accumulator's lock held.
    "producer.accumulate",
    // The transaction coordinator (transactions/mod.rs): each `__transaction_state` record
    // (InitProducerId, AddPartitions/AddOffsets, PrepareCommit/PrepareAbort, CompleteCommit/
    // CompleteAbort) before and after its append (durable but for Complete*); each marker before
    // and after its append (one hit per partition; COMMIT markers are synced together after the
    // last); TxnOffsetCommit's transactional offsets batch.
    "txn.init.before_record",
    "txn.init.after_record",
    "txn.add.before_record",
    "txn.add.after_record",
    "txn.offsets.before_append",
    "txn.offsets.after_append",
    "txn.prepare.before_record",
    "txn.prepare.after_record",
    "txn.marker.before",
    "txn.marker.after",
    "txn.complete.before_record",
    "txn.complete.after_record",
    // The server's shared partition log locked for a Produce request (server/produce.rs).
    "server.produce",
    // A Produce's transactional batches verified by the coordinator, not yet appended, no lock
    // held (server/produce.rs): where a marker may land between the two (the verification guard).
    "server.produce.verified",
    // The server's consumer-group state locked for a Heartbeat (server/group.rs).
    "server.group_heartbeat",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Kill,
    Errno(i32),
    Panic,
    Stop,
}

struct Point {
    name: &'static str,
    action: Action,
    /// Fire only on this hit (1-based); every hit when None.
    nth: Option<u64>,
    hits: AtomicU64,
}

static POINTS: OnceLock<Option<Vec<Point>>> = OnceLock::new();

fn parse(spec: &str) -> Vec<Point> {
    let mut points = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let parsed = item.split_once('=').and_then(|(name, action)| {
            let name = *NAMES.iter().find(|n| **n == name.trim())?;
            let (action, nth) = match action.trim().split_once('@') {
                Some((a, n)) => (a, Some(n.parse::<u64>().ok().filter(|&n| n > 0)?)),
                None => (action.trim(), None),
            };
            let action = match action {
                "kill" => Action::Kill,
                "enospc" => Action::Errno(rustix::io::Errno::NOSPC.raw_os_error()),
                "emfile" => Action::Errno(rustix::io::Errno::MFILE.raw_os_error()),
                "eio" => Action::Errno(rustix::io::Errno::IO.raw_os_error()),
                "panic" => Action::Panic,
                "stop" => Action::Stop,
                _ => return None,
            };
            Some(Point { name, action, nth, hits: AtomicU64::new(0) })
        });
        match parsed {
            Some(p) => points.push(p),
            None => eprintln!(
                "kafkalite: ignoring KAFKALITE_FAILPOINTS entry {item:?}: expected name=kill|enospc|emfile|eio|panic|stop[@N] \
                 with a name from {NAMES:?}"
            ),
        }
    }
    points
}

fn points() -> Option<&'static [Point]> {
    POINTS
        .get_or_init(|| std::env::var("KAFKALITE_FAILPOINTS").ok().map(|s| parse(&s)).filter(|p| !p.is_empty()))
        .as_deref()
}

/// Check fail point `name`: Ok unless it is configured to fire now, in which case it kills
/// the process, panics, returns the configured I/O error, or stops the process (Ok once it is
/// continued).
#[inline]
pub fn hit(name: &'static str) -> std::io::Result<()> {
    debug_assert!(NAMES.contains(&name), "unlisted fail point {name}");
    match points() {
        None => Ok(()),
        Some(points) => fire(points, name),
    }
}

#[cold]
fn fire(points: &[Point], name: &str) -> std::io::Result<()> {
    for p in points.iter().filter(|p| p.name == name) {
        let hit = p.hits.fetch_add(1, Ordering::Relaxed) + 1;
        if p.nth.is_some_and(|n| n != hit) {
            continue;
        }
        match p.action {
            Action::Kill => {
                let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
                // SIGKILL cannot be caught; should delivery lag, never run the step.
                loop {
                    std::thread::park();
                }
            }
            Action::Panic => panic!("injected panic (fail point {})", p.name),
            Action::Stop => {
                // SIGSTOP to this thread (`raise` is tgkill to the caller), not to the process:
                // one sent to the process is taken by whichever thread the kernel picks, and
                // this one ran on into its step (an append lock taken) until that thread woke
                // to stop them all. A thread's own SIGSTOP is taken as the call returns: it
                // stops here, and with it the process (stop signals act on every thread).
                // SAFETY: raise has no preconditions; SIGSTOP runs no handler (none can be set).
                let _ = unsafe { libc::raise(libc::SIGSTOP) };
            }
            Action::Errno(code) => {
                let os = std::io::Error::from_raw_os_error(code);
                return Err(std::io::Error::new(os.kind(), Injected { code, name: p.name }));
            }
        }
    }
    Ok(())
}

/// The error a fail point injects: the errno the system call would have returned, and the
/// point's name for the message.
#[derive(Debug)]
struct Injected {
    code: i32,
    name: &'static str,
}

impl std::fmt::Display for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let os = std::io::Error::from_raw_os_error(self.code).to_string();
        let strerror = os.strip_suffix(&format!(" (os error {})", self.code)).unwrap_or(&os);
        write!(f, "{strerror} (fail point {})", self.name)
    }
}

impl std::error::Error for Injected {}

/// The errno of an I/O error, a real one or one a fail point injected (which `std` can only
/// carry as a custom error), so both reach Python's `OSError.errno`.
pub fn errno(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| e.get_ref()?.downcast_ref::<Injected>().map(|i| i.code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_actions_and_counts() {
        let p = parse(
            "roll.after_seal=kill, segment.reserve=enospc@2,nope=eio,roll.before_seal=bad,dir.sync=panic,follow.open_segment=stop@3",
        );
        assert_eq!(p.len(), 4);
        assert_eq!(p[2].action, Action::Panic);
        assert_eq!((p[3].action, p[3].nth), (Action::Stop, Some(3)));
        assert_eq!(p[0].action, Action::Kill);
        assert_eq!(p[1].nth, Some(2));
        assert!(fire(&p, "segment.reserve").is_ok());
        let e = fire(&p, "segment.reserve").unwrap_err();
        assert!(e.to_string().contains("segment.reserve"));
        assert_eq!(errno(&e), Some(rustix::io::Errno::NOSPC.raw_os_error()));
        assert_eq!(errno(&std::io::Error::from_raw_os_error(24)), Some(24));
        assert_eq!(errno(&std::io::Error::other("no errno")), None);
        assert!(fire(&p, "segment.reserve").is_ok());
    }
}
