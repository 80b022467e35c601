//! The topic metadata journal (`datadir/metadata_file.rs`, `journal.rs`) under the faults it
//! guards against: a child process killed (or failing with ENOSPC) at every step of an append
//! and of the compaction that follows it, a torn tail, a CRC-bad tail, an entry replayed twice,
//! and a directory written before the journal existed.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use kafkalite::storage::datadir::{changes_since, update_metadata, DataDir, Delta, COMPACT_MIN_BYTES};
use kafkalite::storage::files::{TOPICS_FILE, TOPICS_JOURNAL_FILE};
use kafkalite::Error;
use serde_json::{json, Value};

const CHILD_ENV: &str = "KAFKALITE_TOPICS_TEST_CHILD";
/// Enough long-named topics for one entry to pass `COMPACT_MIN_BYTES`, so the append that
/// writes it compacts right after.
const BULK: usize = 1500;

fn bulk_name(i: usize) -> String {
    format!("{}-{i:05}", "b".repeat(200))
}

/// The topics as a reader that has never looked sees them (no cache: straight from the files).
fn topics_on_disk(dir: &Path) -> BTreeMap<String, Value> {
    let (_, delta) = changes_since(dir, None).unwrap();
    let Delta::Whole(Some(data)) = delta else { panic!("no metadata in {}", dir.display()) };
    data["topics"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn generations(dir: &Path) -> (u64, u64) {
    let snapshot: Value = serde_json::from_slice(&std::fs::read(dir.join(TOPICS_FILE)).unwrap()).unwrap();
    let journal = std::fs::read(dir.join(TOPICS_JOURNAL_FILE)).unwrap();
    (snapshot["journal"].as_u64().unwrap_or(0), u64::from_be_bytes(journal[8..16].try_into().unwrap()))
}

/// The child's work: one change adding `BULK` topics (one entry past the compaction size).
#[test]
fn child_process_bulk_change() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let result = update_metadata(Path::new(&dir), |data| {
        let mut data = data.unwrap();
        let topics = data["topics"].as_object_mut().unwrap();
        for i in 0..BULK {
            topics.insert(bulk_name(i), json!({"partitions": 1, "config": {}}));
        }
        Ok::<_, Error>(data)
    });
    match result {
        Ok(()) => println!("child: changed"),
        Err(e) => println!("child: failed: {e}"),
    }
}

fn run_child(dir: &Path, failpoint: &str) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    let spec = match failpoint.split_once('@') {
        Some((name, nth)) => format!("{name}@{nth}"),
        None => failpoint.to_string(),
    };
    Command::new(exe)
        .args(["topics_journal::child_process_bulk_change", "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, dir)
        .env("KAFKALITE_FAILPOINTS", spec)
        .output()
        .unwrap()
}

fn seeded() -> (tempfile::TempDir, DataDir) {
    let root = tempfile::tempdir().unwrap();
    let dd = DataDir::new(root.path()).unwrap();
    assert!(dd.create_topic("base", 1, &BTreeMap::new()).unwrap()); // the first write: a snapshot
    assert!(dd.create_topic("second", 2, &BTreeMap::new()).unwrap()); // a journal entry
    (root, dd)
}

#[test]
fn a_kill_at_every_step_of_an_append_and_its_compaction_loses_and_doubles_nothing() {
    // (fail point, whether the bulk entry was written whole before the kill)
    let steps = [
        ("topics.journal.append", false),
        ("topics.journal.mid_entry", false),
        ("topics.journal.sync", true),
        ("topics.snapshot.write", true),
        ("checkpoint.write@1", true), // the new snapshot's temp file
        ("checkpoint.rename@1", true),
        ("topics.snapshot.written", true), // snapshot renamed in, journal not yet replaced
        ("checkpoint.write@2", true),      // the new journal's temp file
        ("checkpoint.rename@2", true),
    ];
    for (step, written) in steps {
        let (root, dd) = seeded();
        let dir = root.path();
        let (name, nth) = step.split_once('@').map_or((step, None), |(n, k)| (n, Some(k)));
        let spec = match nth {
            Some(k) => format!("{name}=kill@{k}"),
            None => format!("{name}=kill"),
        };
        let out = run_child(dir, &spec);
        assert!(!out.status.success(), "{step}: the child was not killed: {}", String::from_utf8_lossy(&out.stdout));
        let mut expected: Vec<String> = vec!["base".into(), "second".into()];
        if written {
            expected.extend((0..BULK).map(bulk_name));
        }
        expected.sort();
        let listed: Vec<String> = topics_on_disk(dir).into_keys().collect();
        assert_eq!(listed.len(), expected.len(), "{step}");
        assert_eq!(listed, expected, "{step}");
        // This process's cached view agrees, and the next writer goes on from there: a killed
        // append's tail is cut, an interrupted compaction's old journal is replaced, not replayed.
        assert_eq!(dd.topics().unwrap().len(), expected.len(), "{step}");
        assert!(dd.create_topic("after", 3, &BTreeMap::new()).unwrap(), "{step}");
        dd.delete_topic("second").unwrap();
        let listed = topics_on_disk(dir);
        assert_eq!(listed.len(), expected.len(), "{step}: one created, one deleted");
        assert_eq!(listed["after"]["partitions"], json!(3), "{step}");
        assert!(!listed.contains_key("second"), "{step}: a deleted topic came back");
        let (wanted, journal) = generations(dir);
        assert_eq!(wanted, journal, "{step}: the journal in use is the one the snapshot names");
        let stray: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".kafkalite-topics") && n != TOPICS_FILE && n != TOPICS_JOURNAL_FILE)
            .collect();
        assert!(stray.iter().all(|n| n.ends_with(".tmp")), "{step}: {stray:?}");
    }
}

#[test]
fn enospc_at_every_step_is_an_error_or_a_completed_change_never_damage() {
    let steps = [
        ("topics.journal.append", false),
        ("topics.journal.mid_entry", false),
        ("topics.journal.sync", true), // written whole, its sync failed: reported, may have taken effect
        ("topics.snapshot.write", true), // the compaction fails: logged, the change stands
        ("topics.snapshot.written", true),
    ];
    for (step, written) in steps {
        let (root, dd) = seeded();
        let dir = root.path();
        let journal_before = std::fs::metadata(dir.join(TOPICS_JOURNAL_FILE)).unwrap().len();
        let out = run_child(dir, &format!("{step}=enospc"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{step}: {stdout} {}", String::from_utf8_lossy(&out.stderr));
        let failed = stdout.contains("child: failed");
        assert_eq!(
            failed,
            matches!(step, "topics.journal.append" | "topics.journal.mid_entry" | "topics.journal.sync"),
            "{step}: {stdout}"
        );
        if failed {
            assert!(
                stdout.contains("No space left") || stdout.contains("ENOSPC") || stdout.contains("space"),
                "{step}: {stdout}"
            );
        }
        if !written {
            let now = std::fs::metadata(dir.join(TOPICS_JOURNAL_FILE)).unwrap().len();
            assert_eq!(now, journal_before, "{step}: a failed append was cut back");
        }
        let expected = 2 + if written { BULK } else { 0 };
        assert_eq!(topics_on_disk(dir).len(), expected, "{step}");
        assert!(dd.create_topic("after", 1, &BTreeMap::new()).unwrap(), "{step}");
        assert_eq!(topics_on_disk(dir).len(), expected + 1, "{step}");
    }
}

fn append_raw(dir: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(dir.join(TOPICS_JOURNAL_FILE)).unwrap();
    f.write_all(bytes).unwrap();
}

fn entry(payload: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(payload).unwrap();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&kafkalite::storage::record::header::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

#[test]
fn a_torn_tail_is_ignored_by_readers_and_cut_by_the_next_writer() {
    let (root, dd) = seeded();
    let dir = root.path();
    let torn = entry(&json!({"topics": {"ghost": {"partitions": 1, "config": {}}}}));
    let len_before = std::fs::metadata(dir.join(TOPICS_JOURNAL_FILE)).unwrap().len();
    append_raw(dir, &torn[..torn.len() - 3]);
    assert!(!topics_on_disk(dir).contains_key("ghost"));
    assert!(!dd.topics().unwrap().contains_key("ghost"));
    assert!(dd.create_topic("next", 1, &BTreeMap::new()).unwrap());
    let listed = topics_on_disk(dir);
    assert!(listed.contains_key("next") && !listed.contains_key("ghost"), "{listed:?}");
    let grown = std::fs::metadata(dir.join(TOPICS_JOURNAL_FILE)).unwrap().len() - len_before;
    let next = entry(&json!({"topics": {"next": {"partitions": 1, "config": {}}}}));
    assert_eq!(grown, next.len() as u64, "the torn bytes were cut before the append");
}

#[test]
fn a_crc_bad_tail_is_ignored_by_readers_and_cut_by_the_next_writer() {
    let (root, dd) = seeded();
    let dir = root.path();
    let mut bad = entry(&json!({"topics": {"ghost": {"partitions": 1, "config": {}}}}));
    let last = bad.len() - 2;
    bad[last] ^= 0x20;
    append_raw(dir, &bad);
    assert!(!topics_on_disk(dir).contains_key("ghost"));
    assert!(dd.create_topic("next", 1, &BTreeMap::new()).unwrap());
    let listed = topics_on_disk(dir);
    assert!(listed.contains_key("next") && !listed.contains_key("ghost") && listed.contains_key("second"));
}

#[test]
fn replaying_an_entry_twice_changes_nothing() {
    let (root, dd) = seeded();
    let dir = root.path();
    let journal = std::fs::read(dir.join(TOPICS_JOURNAL_FILE)).unwrap();
    let once = topics_on_disk(dir);
    append_raw(dir, &journal[16..]); // every entry again
    assert_eq!(topics_on_disk(dir), once);
    assert_eq!(dd.topics().unwrap().len(), once.len());
}

#[test]
fn a_reader_with_a_position_reads_only_what_was_appended() {
    let (root, dd) = seeded();
    let dir = root.path();
    let (pos, _) = changes_since(dir, None).unwrap();
    let (same, delta) = changes_since(dir, Some(&pos)).unwrap();
    assert!(matches!(delta, Delta::Unchanged) && same == pos);
    dd.create_topic("third", 1, &BTreeMap::new()).unwrap();
    let (_, delta) = changes_since(dir, Some(&pos)).unwrap();
    let Delta::Entries(entries) = delta else { panic!("expected the new entry only") };
    assert_eq!(entries, vec![json!({"topics": {"third": {"partitions": 1, "config": {}}}})]);
}

#[test]
fn bytes_written_per_change_do_not_grow_with_the_topic_count() {
    let (root, dd) = seeded();
    let dir = root.path();
    let journal_len = || std::fs::metadata(dir.join(TOPICS_JOURNAL_FILE)).unwrap().len();
    let snapshot_len = || std::fs::metadata(dir.join(TOPICS_FILE)).unwrap().len();
    let mut growth = Vec::new();
    for i in 0..600 {
        let (j, s) = (journal_len(), snapshot_len());
        dd.create_topic(&format!("topic-{i:05}"), 1, &BTreeMap::new()).unwrap();
        if i % 100 == 0 {
            assert_eq!(snapshot_len(), s, "the snapshot is not rewritten per create");
            growth.push(journal_len() - j);
        }
    }
    assert!(growth.iter().all(|g| *g == growth[0]), "{growth:?}");
    assert!(journal_len() < COMPACT_MIN_BYTES);
}

#[test]
fn a_directory_written_before_the_journal_opens_unchanged_and_migrates_on_its_first_write() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    // Today's release's file, exactly: no "journal" key, indent 1.
    let old = "{\n \"config\": {\n  \"num.partitions\": 2\n },\n \"topics\": {\n  \"a\": {\n   \"config\": {},\n   \
               \"partitions\": 2\n  }\n },\n \"version\": 1\n}";
    std::fs::write(dir.join(TOPICS_FILE), old).unwrap();
    std::fs::create_dir_all(dir.join("a-0")).unwrap();
    std::fs::create_dir_all(dir.join("a-1")).unwrap();
    let dd = DataDir::open(dir).unwrap();
    assert_eq!(dd.topics().unwrap()["a"].partitions, 2);
    assert_eq!(dd.dir_config().unwrap()["num.partitions"], json!(2));
    assert!(!dir.join(TOPICS_JOURNAL_FILE).exists(), "reading changes nothing");
    assert_eq!(std::fs::read_to_string(dir.join(TOPICS_FILE)).unwrap(), old);
    assert!(dd.create_topic("b", 1, &BTreeMap::new()).unwrap());
    assert_eq!(std::fs::read_to_string(dir.join(TOPICS_FILE)).unwrap(), old, "the snapshot is kept as it is");
    assert_eq!(generations(dir), (0, 0));
    let listed = topics_on_disk(dir);
    assert_eq!(listed.keys().collect::<Vec<_>>(), ["a", "b"]);
}
