//! The transaction coordinator (`kafkalite::coordination::transactions`): a process killed at every step of
//! EndTxn (fail points, a child process of this test binary) leaves a state the next user of
//! the transactional id completes: committed data all visible to read_committed, aborted or
//! never-completed data never, one marker per partition; older epochs fenced at the
//! coordinator and at the partitions; timeouts abort; transactional offsets count iff
//! committed; a held id lock makes others fail with CONCURRENT_TRANSACTIONS within a bound.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kafkalite::coordination::offsets_codec::{decode_key, decode_value, offsets_partition, OFFSETS_TOPIC};
use kafkalite::coordination::transactions::{Coordinator, TransactionState};
use kafkalite::storage::datadir::DataDir;
use kafkalite::storage::error::TxnErrorKind;
use kafkalite::storage::read_committed::{read_txn_index, TxnState};
use kafkalite::storage::record::{OwnedRecord, RecordInput};
use kafkalite::{Error, Log, LogConfig};

const TXN: &str = "txn-app";
const CHILD_ENV: &str = "KAFKALITE_TXN_TEST_CHILD";

fn setup(dir: &Path) {
    DataDir::new(dir).unwrap().create_topic("a", 2, &BTreeMap::new()).unwrap();
}

fn writer(dir: &Path, partition: i32) -> Log {
    Log::open(dir.join(format!("a-{partition}")), LogConfig { shared_writers: true, ..LogConfig::default() }).unwrap()
}

fn append(log: &mut Log, producer: (i64, i16), values: &[&str]) -> kafkalite::Result<(i64, i64)> {
    log.set_transactional_producer(Some(producer));
    let inputs: Vec<RecordInput<'_>> = values
        .iter()
        .map(|v| RecordInput { key: None, value: Some(v.as_bytes()), headers: &[], timestamp: 1000 })
        .collect();
    log.append_records(&inputs)
}

/// (read_committed values, control batches, LSO == end) of a partition directory.
fn committed(path: &Path) -> (Vec<String>, usize, bool) {
    let mut log = Log::open(path, LogConfig { readonly: true, ..LogConfig::default() }).unwrap();
    let mut state = TxnState::new();
    let mut out: Vec<OwnedRecord> = Vec::new();
    let start = log.start_offset();
    state.scan_committed(&mut log, start, None, usize::MAX, &mut out).unwrap();
    let controls = log.batch_headers(start, usize::MAX).unwrap().iter().filter(|h| h.is_control()).count();
    let stable = state.last_stable_offset(&log) == log.end_offset();
    let values = out.into_iter().map(|r| String::from_utf8(r.value.unwrap()).unwrap()).collect();
    (values, controls, stable)
}

fn kind(e: Error) -> TxnErrorKind {
    e.txn_kind().unwrap_or_else(|| panic!("not a transaction error: {e}"))
}

/// The child's work: one transaction over a-0 and a-1 (and the group's offsets), ended with
/// `commit`, under whatever `KAFKALITE_FAILPOINTS` the parent set (which kills it).
#[test]
fn child_process_transaction() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let dir = Path::new(&dir);
    let commit = std::env::var("KAFKALITE_TXN_TEST_COMMIT").unwrap() == "1";
    let c = Coordinator::open(dir).unwrap();
    let (pid, epoch) = c.init_producer_id(TXN, 60_000, None, 1).unwrap();
    c.add_partitions(TXN, pid, epoch, &[("a".into(), 0), ("a".into(), 1)], 2).unwrap();
    append(&mut writer(dir, 0), (pid, epoch), &["x0", "x1"]).unwrap();
    append(&mut writer(dir, 1), (pid, epoch), &["y0"]).unwrap();
    c.add_offsets(TXN, pid, epoch, "g", 3).unwrap();
    c.txn_offset_commit(TXN, pid, epoch, "g", &[("in".into(), 0, 42, None)], 4).unwrap();
    c.end_txn(TXN, pid, epoch, commit, 5).unwrap();
    std::fs::write(dir.join("child-finished"), b"").unwrap();
}

/// The group's committed offset of in-0 as a read_committed reader sees `__consumer_offsets`.
fn committed_offset(dir: &Path, group: &str) -> Option<i64> {
    let path = dir.join(format!("{OFFSETS_TOPIC}-{}", offsets_partition(group)));
    if !path.exists() {
        return None;
    }
    let mut log = Log::open(path, LogConfig { readonly: true, ..LogConfig::default() }).unwrap();
    let mut out: Vec<OwnedRecord> = Vec::new();
    let start = log.start_offset();
    TxnState::new().scan_committed(&mut log, start, None, usize::MAX, &mut out).unwrap();
    let mut offset = None;
    for r in out {
        if let Some((g, t, p)) = decode_key(r.key.as_deref().unwrap()).unwrap() {
            if g == group && t == "in" && p == 0 {
                offset = r.value.map(|v| decode_value(&v).unwrap().0);
            }
        }
    }
    offset
}

#[test]
fn a_kill_at_every_step_is_completed_by_the_next_user_of_the_id() {
    let steps = [
        ("txn.add.after_record", false),
        ("txn.offsets.after_append", false),
        ("txn.prepare.before_record", false),
        ("txn.prepare.after_record", true),
        ("txn.marker.before@1", true),
        ("txn.marker.after@1", true),
        ("txn.marker.after@2", true),
        ("txn.marker.after@3", true),
        ("txn.complete.before_record", true),
        ("txn.complete.after_record", true),
    ];
    let exe = std::env::current_exe().unwrap();
    for commit in [true, false] {
        for (step, decided) in steps {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path();
            setup(dir);
            let status = Command::new(&exe)
                .args(["transactions::child_process_transaction", "--exact", "--test-threads=1", "--nocapture"])
                .env(CHILD_ENV, dir)
                .env("KAFKALITE_TXN_TEST_COMMIT", if commit { "1" } else { "0" })
                .env(
                    "KAFKALITE_FAILPOINTS",
                    match step.split_once('@') {
                        Some((name, nth)) => format!("{name}=kill@{nth}"),
                        None => format!("{step}=kill"),
                    },
                )
                .output()
                .unwrap();
            let what = format!("commit={commit}, killed at {step}");
            assert!(!dir.join("child-finished").exists(), "{what}: the child was not killed");
            assert!(!status.status.success(), "{what}");
            let c = Coordinator::open(dir).unwrap();
            let before = c.describe(TXN).unwrap().unwrap();
            // The next user of the id (a restarted producer) completes or aborts it.
            let (pid, epoch) = c.init_producer_id(TXN, 60_000, None, 10).unwrap();
            assert_eq!(before.producer_id, pid, "{what}");
            assert!(epoch > before.producer_epoch, "{what}: the restarted producer bumps the epoch");
            let visible = decided && commit;
            let (a0, c0, s0) = committed(&dir.join("a-0"));
            let (a1, c1, s1) = committed(&dir.join("a-1"));
            if visible {
                assert_eq!((a0, a1), (vec!["x0".to_string(), "x1".into()], vec!["y0".to_string()]), "{what}");
                assert_eq!(committed_offset(dir, "g"), Some(42), "{what}");
            } else {
                assert!(a0.is_empty() && a1.is_empty(), "{what}: aborted data visible: {a0:?} {a1:?}");
                assert_eq!(committed_offset(dir, "g"), None, "{what}");
            }
            assert!(s0 && s1, "{what}: a transaction is left open (LSO below the end)");
            assert_eq!((c0, c1), (1, 1), "{what}: exactly one marker per partition");
            let after = c.describe(TXN).unwrap().unwrap();
            assert_eq!(after.state, TransactionState::Empty, "{what}");
            if !visible && step != "txn.add.after_record" {
                let index = read_txn_index(&dir.join("a-0").join("00000000000000000000.txnindex")).unwrap();
                assert_eq!(index.len(), 1, "{what}: the abort is in .txnindex");
                assert_eq!((index[0].first_offset, index[0].last_offset), (0, 2), "{what}");
            }
            // The killed producer's epoch is fenced at the coordinator, and at the partitions of
            // the transaction the restart aborted (its markers carry the bumped epoch).
            let zombie = c.add_partitions(TXN, pid, before.producer_epoch, &[("a".into(), 0)], 11).unwrap_err();
            assert_eq!(kind(zombie), TxnErrorKind::ProducerFenced, "{what}");
            if !decided && step != "txn.add.after_record" {
                let err = append(&mut writer(dir, 0), (pid, before.producer_epoch), &["zombie"]).unwrap_err();
                assert_eq!(kind(err), TxnErrorKind::ProducerFenced, "{what}");
            }
        }
    }
}

#[test]
fn an_older_epoch_is_fenced_at_the_coordinator_and_at_the_partitions() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    setup(dir);
    let c = Coordinator::open(dir).unwrap();
    let (pid, e0) = c.init_producer_id(TXN, 60_000, None, 1).unwrap();
    assert_eq!(e0, 0);
    c.add_partitions(TXN, pid, e0, &[("a".into(), 0)], 2).unwrap();
    let mut zombie = writer(dir, 0);
    append(&mut zombie, (pid, e0), &["z0"]).unwrap();
    // Another instance with the same id: the open transaction is aborted, the epoch bumped.
    let other = Coordinator::open(dir).unwrap();
    let (pid2, e1) = other.init_producer_id(TXN, 60_000, None, 3).unwrap();
    assert_eq!(pid2, pid);
    assert!(e1 > e0);
    assert_eq!(kind(append(&mut zombie, (pid, e0), &["z1"]).unwrap_err()), TxnErrorKind::ProducerFenced);
    assert_eq!(kind(c.add_partitions(TXN, pid, e0, &[("a".into(), 1)], 4).unwrap_err()), TxnErrorKind::ProducerFenced);
    assert_eq!(kind(c.end_txn(TXN, pid, e0, true, 4).unwrap_err()), TxnErrorKind::ProducerFenced);
    assert_eq!(kind(c.end_txn(TXN, pid + 1, e1, true, 4).unwrap_err()), TxnErrorKind::InvalidProducerIdMapping);
    // KIP-360: a client re-initialising with the fenced (id, epoch) is fenced too.
    assert_eq!(kind(c.init_producer_id(TXN, 60_000, Some((pid, e0)), 5).unwrap_err()), TxnErrorKind::ProducerFenced);
    let (values, _, stable) = committed(&dir.join("a-0"));
    assert!(values.is_empty() && stable, "{values:?}");
    // KIP-890 verification, for a server's produce: the zombie's epoch is fenced, a partition
    // outside the open transaction is refused.
    assert_eq!(kind(c.verify_partition(TXN, pid, e0, "a", 0).unwrap_err()), TxnErrorKind::ProducerFenced);
    assert_eq!(kind(c.verify_partition(TXN, pid, e1, "a", 0).unwrap_err()), TxnErrorKind::InvalidTxnState);
    // The new producer's transaction commits.
    c.add_partitions(TXN, pid, e1, &[("a".into(), 0)], 6).unwrap();
    c.verify_partition(TXN, pid, e1, "a", 0).unwrap();
    append(&mut writer(dir, 0), (pid, e1), &["n0"]).unwrap();
    c.end_txn(TXN, pid, e1, true, 7).unwrap();
    c.end_txn(TXN, pid, e1, true, 8).unwrap(); // a retried commit
    assert_eq!(kind(c.end_txn(TXN, pid, e1, false, 8).unwrap_err()), TxnErrorKind::InvalidTxnState);
    assert_eq!(committed(&dir.join("a-0")).0, vec!["n0".to_string()]);
    assert_eq!(kind(c.init_producer_id(TXN, 0, None, 9).unwrap_err()), TxnErrorKind::InvalidTransactionTimeout);
    assert_eq!(c.list().unwrap().len(), 1);
}

#[test]
fn an_expired_transaction_is_aborted_and_its_producer_fenced() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    setup(dir);
    let c = Coordinator::open(dir).unwrap();
    let (pid, epoch) = c.init_producer_id(TXN, 100, None, 1000).unwrap();
    c.add_partitions(TXN, pid, epoch, &[("a".into(), 1)], 1000).unwrap();
    append(&mut writer(dir, 1), (pid, epoch), &["late"]).unwrap();
    assert_eq!(c.abort_expired_and_complete_pending(1050).unwrap(), 0, "not expired yet");
    assert_eq!(c.abort_expired_and_complete_pending(1200).unwrap(), 1);
    let m = c.describe(TXN).unwrap().unwrap();
    assert_eq!((m.state, m.producer_epoch), (TransactionState::CompleteAbort, epoch + 1));
    assert_eq!(kind(c.end_txn(TXN, pid, epoch, true, 1300).unwrap_err()), TxnErrorKind::ProducerFenced);
    let (values, controls, stable) = committed(&dir.join("a-1"));
    assert!(values.is_empty() && stable && controls == 1);
}

/// A start after a restart of the machine (another boot id recorded) aborts every open
/// transaction and fences its producer, then records the boot: the next start under the same
/// boot aborts nothing. A transaction opened under the same boot survives it.
#[test]
fn a_start_after_a_reboot_aborts_open_transactions_and_one_after_the_same_boot_does_not() {
    use kafkalite::coordination::transactions::boot_id;
    let Some(now) = boot_id::current() else { return }; // no boot id here: every start aborts
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    setup(dir);
    let c = Coordinator::open(dir).unwrap();
    let (pid, epoch) = c.init_producer_id(TXN, 60_000, None, 1000).unwrap();
    c.add_partitions(TXN, pid, epoch, &[("a".into(), 0)], 1000).unwrap();
    append(&mut writer(dir, 0), (pid, epoch), &["acknowledged, maybe lost"]).unwrap();
    boot_id::record(dir, "an-earlier-boot").unwrap();
    assert_eq!(c.abort_open_after_reboot(1100).unwrap(), 1);
    let m = c.describe(TXN).unwrap().unwrap();
    // Only the decision is recorded at the start (no partition lock needed); the id's next use
    // writes the markers.
    assert_eq!((m.state, m.producer_epoch), (TransactionState::PrepareAbort, epoch + 1));
    assert_eq!(kind(c.end_txn(TXN, pid, epoch, true, 1200).unwrap_err()), TxnErrorKind::ProducerFenced);
    assert_eq!(c.describe(TXN).unwrap().unwrap().state, TransactionState::CompleteAbort);
    let (values, controls, stable) = committed(&dir.join("a-0"));
    assert!(values.is_empty() && stable && controls == 1);
    assert_eq!(boot_id::recorded(dir), boot_id::Recorded::Id(now));

    let (pid, epoch) = c.init_producer_id(TXN, 60_000, None, 1300).unwrap();
    c.add_partitions(TXN, pid, epoch, &[("a".into(), 0)], 1300).unwrap();
    append(&mut writer(dir, 0), (pid, epoch), &["kept"]).unwrap();
    assert_eq!(c.abort_open_after_reboot(1400).unwrap(), 0, "same boot: nothing to abort");
    c.end_txn(TXN, pid, epoch, true, 1500).unwrap();
    assert_eq!(committed(&dir.join("a-0")).0, vec!["kept".to_string()]);
}

/// After a reboot, an open transaction whose id's lock another process holds (stopped, say)
/// cannot be aborted: the start fails within the lock wait, naming the id, and records no boot
/// (so the next start aborts it), rather than serving with the transaction still committable.
#[test]
fn a_start_after_a_reboot_fails_within_the_bound_while_an_open_transaction_s_lock_is_held() {
    use kafkalite::coordination::transactions::boot_id;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    setup(dir);
    let c = Coordinator::open(dir).unwrap().with_lock_wait(Duration::from_millis(300));
    let (pid, epoch) = c.init_producer_id(TXN, 60_000, None, 1000).unwrap();
    c.add_partitions(TXN, pid, epoch, &[("a".into(), 0)], 1000).unwrap();
    boot_id::record(dir, "an-earlier-boot").unwrap();
    let held = kafkalite::coordination::transactions::lock::try_lock(dir, TXN, Duration::ZERO).unwrap().unwrap();
    let started = Instant::now();
    let err = c.abort_open_after_reboot(1100).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert_eq!(kind(err), TxnErrorKind::ConcurrentTransactions);
    assert_eq!(boot_id::recorded(dir), boot_id::Recorded::Id("an-earlier-boot".into()));
    assert_eq!(c.describe(TXN).unwrap().unwrap().state, TransactionState::Ongoing);
    drop(held);
    assert_eq!(c.abort_open_after_reboot(1200).unwrap(), 1);
}

#[test]
fn a_held_id_lock_gives_concurrent_transactions_within_the_bound() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    setup(dir);
    let c = Coordinator::open(dir).unwrap().with_lock_wait(Duration::from_millis(300));
    c.init_producer_id(TXN, 60_000, None, 1).unwrap();
    let held = kafkalite::coordination::transactions::lock::try_lock(dir, TXN, Duration::ZERO).unwrap().unwrap();
    let started = Instant::now();
    let err = c.init_producer_id(TXN, 60_000, None, 2).unwrap_err();
    assert_eq!(kind(err), TxnErrorKind::ConcurrentTransactions);
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    drop(held);
    c.init_producer_id(TXN, 60_000, None, 3).unwrap();
}

#[test]
fn compaction_keeps_the_committed_value_over_an_aborted_one() {
    use kafkalite::storage::cleaner::CleanOptions;
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("c-0");
    let mut log =
        Log::open(&path, LogConfig { compact: true, segment_bytes: 1 << 20, ..LogConfig::default() }).unwrap();
    let record = |v: &'static [u8]| RecordInput { key: Some(b"k"), value: Some(v), headers: &[], timestamp: 1 };
    log.set_transactional_producer(Some((5, 0)));
    log.append_records(&[record(b"committed")]).unwrap();
    log.append_txn_marker(5, 0, true, 0, 2).unwrap().unwrap();
    log.append_records(&[record(b"aborted")]).unwrap();
    let marker = log.append_txn_marker(5, 0, false, 0, 3).unwrap().unwrap();
    assert_eq!(marker.aborted.map(|a| (a.first_offset, a.last_offset)), Some((2, 3)));
    log.roll().unwrap();
    log.set_transactional_producer(Some((6, 0)));
    log.append_records(&[record(b"open")]).unwrap(); // an open transaction: never cleaned
    log.roll().unwrap();
    log.set_transactional_producer(None);
    log.append_records(&[RecordInput { key: Some(b"x"), value: Some(b"y"), headers: &[], timestamp: 1 }]).unwrap();
    log.roll().unwrap();
    log.clean(CleanOptions { now_ms: 10, delete_retention_ms: 0, min_compaction_lag_ms: 0 }).unwrap();
    let mut out: Vec<OwnedRecord> = Vec::new();
    let start = log.start_offset();
    log.scan_records(start, None, usize::MAX, &mut out).unwrap();
    let values: Vec<Vec<u8>> = out.into_iter().filter_map(|r| r.value).collect();
    assert!(values.contains(&b"committed".to_vec()), "{values:?}");
    assert!(!values.contains(&b"aborted".to_vec()), "aborted records are removed by cleaning");
    assert!(values.contains(&b"open".to_vec()), "nothing at or past the LSO is cleaned");
    log.close().unwrap();
}

/// The producer epochs of the control batches (markers) of a partition directory.
fn marker_stamps(path: &Path) -> Vec<(i64, i16)> {
    let mut log = Log::open(path, LogConfig { readonly: true, ..LogConfig::default() }).unwrap();
    let start = log.start_offset();
    let headers = log.batch_headers(start, usize::MAX).unwrap();
    headers.iter().filter(|h| h.is_control()).map(|h| (h.producer_id, h.producer_epoch)).collect()
}

#[test]
fn a_version_2_end_bumps_the_epoch_and_an_exhausted_one_moves_to_a_new_producer_id() {
    use kafkalite::coordination::transactions::state_log::{
        encode_key, encode_value, state_partition, TRANSACTION_STATE_TOPIC,
    };
    use kafkalite::coordination::transactions::TV_2;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    setup(dir);
    let c = Coordinator::open(dir).unwrap();
    let (pid, e0) = c.init_producer_id(TXN, 60_000, None, 1).unwrap();
    c.add_partitions_as(TXN, pid, e0, &[("a".into(), 0)], TV_2, 2).unwrap();
    append(&mut writer(dir, 0), (pid, e0), &["c0"]).unwrap();
    assert_eq!(c.end_txn_as(TXN, pid, e0, true, TV_2, 3).unwrap(), (pid, e0 + 1));
    assert_eq!(c.end_txn_as(TXN, pid, e0, true, TV_2, 4).unwrap(), (pid, e0 + 1), "a retry");
    assert_eq!(marker_stamps(&dir.join("a-0")), vec![(pid, e0 + 1)]);
    assert_eq!(kind(append(&mut writer(dir, 0), (pid, e0), &["z"]).unwrap_err()), TxnErrorKind::ProducerFenced);
    assert_eq!(c.describe(TXN).unwrap().unwrap().client_transaction_version, TV_2);
    c.close().unwrap();
    // The id at the last epoch a client may hold (as 32,766 ends would leave it), written as a record.
    let mut m = c.describe(TXN).unwrap().unwrap();
    m.producer_epoch = i16::MAX - 1;
    m.state = TransactionState::Empty;
    let state_dir = dir.join(format!("{TRANSACTION_STATE_TOPIC}-{}", state_partition(TXN)));
    let mut state = Log::open(&state_dir, LogConfig { shared_writers: true, ..LogConfig::default() }).unwrap();
    let (key, value) = (encode_key(TXN).unwrap(), encode_value(&m).unwrap());
    state.append_records(&[RecordInput { key: Some(&key), value: Some(&value), headers: &[], timestamp: 5 }]).unwrap();
    state.close().unwrap();
    let c = Coordinator::open(dir).unwrap();
    let last = i16::MAX - 1;
    c.add_partitions_as(TXN, pid, last, &[("a".into(), 1)], TV_2, 6).unwrap();
    append(&mut writer(dir, 1), (pid, last), &["c1"]).unwrap();
    let (next_pid, next_epoch) = c.end_txn_as(TXN, pid, last, true, TV_2, 7).unwrap();
    assert_eq!((next_pid == pid, next_epoch), (false, 0));
    // The markers carry the bumped epoch under the old id; the producer continues under the new.
    assert_eq!(marker_stamps(&dir.join("a-1")), vec![(pid, last + 1)]);
    assert_eq!(committed(&dir.join("a-1")).0, vec!["c1".to_string()]);
    assert_eq!(c.end_txn_as(TXN, pid, last, true, TV_2, 8).unwrap(), (next_pid, 0), "a retry");
    // Version 0 ends keep the epoch.
    c.add_partitions(TXN, next_pid, 0, &[("a".into(), 0)], 9).unwrap();
    assert_eq!(c.end_txn_as(TXN, next_pid, 0, false, 0, 10).unwrap(), (next_pid, 0));
}
