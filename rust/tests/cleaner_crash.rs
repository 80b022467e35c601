//! The cleaner's `.cleaned` / `.swap` crash protocol (`cleaner::replace_group`), tested where
//! it lives: for each step a crash can interrupt, the files that step leaves on disk are made
//! by hand, and the next open must recover the right segments. Before the commit point (the
//! rename to `X.log.swap`) the log is the one before cleaning; from it on, the cleaned one.
//! (The same crashes with real kills run in tests/faults/test_fault_injection.py.)

use std::fs;
use std::path::{Path, PathBuf};

use kafkalite::storage::cleaner::CleanOptions;
use kafkalite::storage::files::{file_name, CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX};
use kafkalite::storage::record::{OwnedRecord, RecordInput};
use kafkalite::{Log, LogConfig};

fn config() -> LogConfig {
    LogConfig { segment_bytes: 2048, compact: true, ..LogConfig::default() }
}

/// (offset, key, value) of every record, read from a fresh open of `dir`.
fn contents(dir: &Path) -> Vec<(i64, Vec<u8>, Vec<u8>)> {
    let mut log = Log::open(dir, config()).unwrap();
    let mut out: Vec<OwnedRecord> = Vec::new();
    let start = log.start_offset();
    log.scan_records(start, None, usize::MAX, &mut out).unwrap();
    log.close().unwrap();
    out.into_iter().map(|r| (r.offset, r.key.unwrap(), r.value.unwrap())).collect()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// A compacted log of several sealed segments holding 4 keys rewritten many times, so cleaning
/// merges all sealed segments into one group based at 0. Returns (before, after): the closed
/// log, and a copy of it cleaned for real.
fn before_and_after(root: &Path) -> (PathBuf, PathBuf, Vec<i64>) {
    let before = root.join("before-0");
    let mut log = Log::open(&before, config()).unwrap();
    for i in 0..200u32 {
        let key = format!("key-{}", i % 4).into_bytes();
        let value = format!("value-{i:04}-{}", "v".repeat(20)).into_bytes();
        log.append_records(&[RecordInput {
            key: Some(&key),
            value: Some(&value),
            headers: &[],
            timestamp: 1000 + i as i64,
        }])
        .unwrap();
    }
    let bases: Vec<i64> = log.segments().iter().map(|s| s.base_offset).collect();
    log.close().unwrap();
    assert!(bases.len() >= 4, "the test needs several sealed segments, got {bases:?}");

    let after = root.join("after-0");
    copy_dir(&before, &after);
    let mut log = Log::open(&after, config()).unwrap();
    let stats =
        log.clean(CleanOptions { now_ms: 1_000_000, delete_retention_ms: 0, min_compaction_lag_ms: 0 }).unwrap();
    assert!(stats.segments_rewritten as usize >= bases.len() - 1, "{stats:?}");
    let after_bases: Vec<i64> = log.segments().iter().map(|s| s.base_offset).collect();
    log.close().unwrap();
    assert_eq!(after_bases, vec![0, *bases.last().unwrap()], "all sealed segments should form one group");
    (before, after, bases)
}

/// The crash points of `replace_group`, in order, with the state each leaves.
#[derive(Clone, Copy, Debug)]
enum Crash {
    /// While writing `0.log.cleaned` (before the commit point): a partial file.
    WritingCleaned,
    /// After the rename to `0.log.swap` and its directory fsync: the commit point.
    AfterCommit,
    /// After the old segment 0's indexes were removed.
    AfterRemovingIndexes,
    /// After `0.log` became a second link to the swap.
    AfterReplacingLog,
    /// After the first of the other old members was deleted.
    AfterDeletingOneMember,
    /// After every old member was deleted, before the swap name was removed.
    AfterDeletingAllMembers,
}

fn leave_state(dir: &Path, cleaned: &Path, members: &[i64], crash: Crash) {
    let log0 = dir.join(file_name(0, LOG_SUFFIX));
    let swap = dir.join(format!("{}{SWAP_SUFFIX}", file_name(0, LOG_SUFFIX)));
    if let Crash::WritingCleaned = crash {
        let bytes = fs::read(cleaned).unwrap();
        let partial = dir.join(format!("{}{CLEANED_SUFFIX}", file_name(0, LOG_SUFFIX)));
        fs::write(partial, &bytes[..bytes.len() / 2]).unwrap();
        return;
    }
    fs::copy(cleaned, &swap).unwrap();
    let step = crash as usize;
    if step >= Crash::AfterRemovingIndexes as usize {
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            fs::remove_file(dir.join(file_name(0, suffix))).unwrap();
        }
    }
    if step >= Crash::AfterReplacingLog as usize {
        let link = dir.join(format!("{}{CLEANED_SUFFIX}", file_name(0, LOG_SUFFIX)));
        fs::hard_link(&swap, &link).unwrap();
        fs::rename(&link, &log0).unwrap();
    }
    let deleted = match crash {
        Crash::AfterDeletingOneMember => 1,
        Crash::AfterDeletingAllMembers => members.len(),
        _ => 0,
    };
    for &member in &members[..deleted] {
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            let _ = fs::remove_file(dir.join(file_name(member, suffix)));
        }
    }
}

#[test]
fn every_crash_point_of_a_swap_recovers_the_right_segments() {
    let root = tempfile::tempdir().unwrap();
    let (before, after, bases) = before_and_after(root.path());
    let old = contents(&before);
    let new = contents(&after);
    assert!(new.len() < old.len(), "cleaning removed nothing");
    let cleaned = after.join(file_name(0, LOG_SUFFIX));
    // The members of the group after its base (the active segment is not cleaned).
    let members = &bases[1..bases.len() - 1];
    for crash in [
        Crash::WritingCleaned,
        Crash::AfterCommit,
        Crash::AfterRemovingIndexes,
        Crash::AfterReplacingLog,
        Crash::AfterDeletingOneMember,
        Crash::AfterDeletingAllMembers,
    ] {
        let dir = root.path().join(format!("{crash:?}-0"));
        copy_dir(&before, &dir);
        leave_state(&dir, &cleaned, members, crash);
        let expected = if matches!(crash, Crash::WritingCleaned) { &old } else { &new };
        assert_eq!(&contents(&dir), expected, "{crash:?}: wrong records after recovery");
        // Nothing of the protocol is left, and exactly the expected segments remain.
        let left = names(&dir);
        assert!(
            !left.iter().any(|n| n.ends_with(SWAP_SUFFIX) || n.ends_with(CLEANED_SUFFIX)),
            "{crash:?}: leftovers {left:?}"
        );
        let logs: Vec<&String> = left.iter().filter(|n| n.ends_with(LOG_SUFFIX)).collect();
        let want = if matches!(crash, Crash::WritingCleaned) { bases.len() } else { 2 };
        assert_eq!(logs.len(), want, "{crash:?}: segments {logs:?}");
        // And the recovered log cleans and appends as usual.
        let mut log = Log::open(&dir, config()).unwrap();
        log.append_records(&[RecordInput {
            key: Some(b"key-0"),
            value: Some(b"later"),
            headers: &[],
            timestamp: 5000,
        }])
        .unwrap();
        log.close().unwrap();
    }
}
