//! The cleaner among shared writers: a writer cleans after another writer's cleaner replaced
//! segments it knew. (Found by the fault suite: `compact-0: acknowledged records lost`, a key's
//! newest record gone while an older one stayed.)

use std::path::Path;

use kafkalite::storage::cleaner::CleanOptions;
use kafkalite::storage::record::{OwnedRecord, RecordInput};
use kafkalite::{Log, LogConfig};

fn config() -> LogConfig {
    LogConfig { segment_bytes: 2048, compact: true, shared_writers: true, ..LogConfig::default() }
}

fn put(log: &mut Log, key: &str, i: u32) {
    let value = format!("{key}-{i:04}-{}", "v".repeat(40)).into_bytes();
    log.append_records(&[RecordInput {
        key: Some(key.as_bytes()),
        value: Some(&value),
        headers: &[],
        timestamp: 1000,
    }])
    .unwrap();
}

fn clean(log: &mut Log) {
    log.clean(CleanOptions { now_ms: 1_000_000, delete_retention_ms: 0, min_compaction_lag_ms: 0 }).unwrap();
}

/// (key, value) of the newest record of every key, from a fresh reader of `dir`.
fn latest(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let mut log = Log::open(dir, LogConfig { readonly: true, ..config() }).unwrap();
    let mut out: Vec<OwnedRecord> = Vec::new();
    let start = log.start_offset();
    log.scan_records(start, None, usize::MAX, &mut out).unwrap();
    out.into_iter()
        .map(|r| (String::from_utf8(r.key.unwrap()).unwrap(), String::from_utf8(r.value.unwrap()).unwrap()))
        .collect()
}

/// Writer `a` appended to segment 0 (its active segment then, writable in its view); writer `b`
/// filled and sealed it, rolled several times and cleaned, merging the sealed segments into a
/// new `0.log` (same name, new file) and deleting the others. When `a` cleans next, the old
/// file it still maps under the name 0 holds none of the records `b` moved into the new one:
/// cleaning that old file wrote them away (before the fix, `a` reopened replaced segments
/// except its own former active segment).
#[test]
fn a_writer_cleans_after_another_writers_cleaner_replaced_its_former_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("compacted-0");
    let mut a = Log::open(&path, config()).unwrap();
    let mut b = Log::open(&path, config()).unwrap();
    let mut written = std::collections::BTreeMap::new();
    let mut put_and_note = |log: &mut Log, key: &str, i: u32| {
        put(log, key, i);
        written.insert(key.to_string(), format!("{key}-{i:04}-{}", "v".repeat(40)));
    };
    for i in 0..3 {
        put_and_note(&mut a, &format!("key-{i}"), i);
    }
    for i in 3..60 {
        put_and_note(&mut b, &format!("key-{}", i % 4), i);
        if i == 30 {
            // Written once, in a segment after 0: only the cleaned copy in b's new 0.log keeps it.
            put_and_note(&mut b, "lonely", i);
        }
    }
    assert!(b.segments().len() >= 4, "the test needs several sealed segments");
    clean(&mut b);
    assert_eq!(b.segments()[0].base_offset, 0);
    assert!(b.segments().len() <= 2, "the sealed segments should have merged into 0");
    for i in 60..100 {
        put_and_note(&mut b, &format!("key-{}", i % 4), i);
    }
    assert_eq!(latest(&path), written, "after b's cleaning");
    clean(&mut a);
    assert_eq!(latest(&path), written, "after a's cleaning: every key's newest record is still there");
    a.close().unwrap();
    b.close().unwrap();
    assert_eq!(latest(&path), written);
}
