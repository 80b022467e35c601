//! Idempotent appends through `Log::append_produce`: retries found at their original offsets
//! across writers and reopenings, and the producer snapshots' lifecycle (roll, close,
//! retention, damage).

use kafkalite::log::Produced;
use kafkalite::producer_state::Refusal;
use kafkalite::record::header::compute_crc;
use kafkalite::record::{BatchBuilder, Compression, RecordInput};
use kafkalite::{Log, LogConfig};

/// A v2 batch of `n` records as an idempotent producer sends it.
fn batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    batch_at(pid, epoch, seq, n, kafkalite::log::now_ms())
}

fn batch_at(pid: i64, epoch: i16, seq: i32, n: usize, timestamp: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, None, 1024);
    let value = [b'v'; 100];
    for _ in 0..n {
        b.push(&RecordInput { key: None, value: Some(&value), headers: &[], timestamp });
    }
    let (mut bytes, mut h) = b.finish(0).unwrap();
    (h.producer_id, h.producer_epoch, h.base_sequence) = (pid, epoch, seq);
    h.write(&mut bytes);
    h.crc = compute_crc(&bytes);
    h.write(&mut bytes);
    bytes
}

fn shared(segment_bytes: u64) -> LogConfig {
    LogConfig { segment_bytes, shared_writers: true, ..LogConfig::default() }
}

fn snapshots(dir: &std::path::Path) -> Vec<i64> {
    kafkalite::producer_state::list_snapshots(dir).unwrap()
}

fn first_offset(p: Produced) -> i64 {
    match p {
        Produced::Appended(first, _) => first,
        Produced::Duplicate(b) => b.first_offset(),
        Produced::Refused(r) => panic!("refused: {r:?}"),
    }
}

#[test]
fn a_retry_through_another_writer_is_found_and_embedded_appends_do_not_disturb() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut a = Log::open(&path, shared(1 << 20)).unwrap();
    let mut b = Log::open(&path, shared(1 << 20)).unwrap();
    assert_eq!(a.append_produce(&batch(7, 0, 0, 3)).unwrap(), Produced::Appended(0, 2));
    b.append_values(&[b"embedded"], 1).unwrap();
    // The other writer learns a's batch from the log before checking.
    assert!(matches!(b.append_produce(&batch(7, 0, 0, 3)).unwrap(), Produced::Duplicate(d) if d.first_offset() == 0));
    assert_eq!(b.append_produce(&batch(7, 0, 3, 1)).unwrap(), Produced::Appended(4, 4));
    assert!(matches!(a.append_produce(&batch(7, 0, 3, 1)).unwrap(), Produced::Duplicate(d) if d.first_offset() == 4));
    assert!(matches!(a.append_produce(&batch(7, 0, 9, 1)).unwrap(), Produced::Refused(Refusal::OutOfOrderSequence(_))));
    assert_eq!(a.end_offset(), 5);
    // Plain appends (Log::append_raw_batches, the Spark sink's path) are not checked.
    assert_eq!(a.append_raw_batches(&batch(7, 0, 0, 3)).unwrap(), (5, 7));
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn snapshots_at_roll_and_close_survive_reopening_and_follow_retention() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let config = LogConfig { segment_bytes: 1024, ..LogConfig::default() };
    let mut log = Log::open(&path, config.clone()).unwrap();
    for i in 0..40 {
        assert_eq!(first_offset(log.append_produce(&batch(1, 0, 2 * i, 2)).unwrap()), 2 * i as i64);
    }
    let segments: Vec<i64> = log.segments().iter().map(|s| s.base_offset).collect();
    assert!(segments.len() > 4, "{segments:?}");
    // Kafka keeps the snapshots from the second newest segment's base on.
    let n = segments.len();
    assert_eq!(snapshots(&path), vec![segments[n - 2], segments[n - 1]]);
    log.close().unwrap();
    assert_eq!(snapshots(&path).last(), Some(&80));
    let mut log = Log::open(&path, config.clone()).unwrap();
    assert_eq!(first_offset(log.append_produce(&batch(1, 0, 78, 2)).unwrap()), 78, "the retry is a duplicate");
    assert_eq!(log.end_offset(), 80);
    assert_eq!(log.producer_state().unwrap().producer(1).unwrap().1.len(), 1, "a snapshot keeps one batch");
    // Retention deletes segments, and the snapshots below them go too.
    log.delete_records_before(79).unwrap();
    let first = log.segments()[0].base_offset;
    assert!(snapshots(&path).iter().all(|&s| s >= first), "{:?} below {first}", snapshots(&path));
    log.close().unwrap();
}

#[test]
fn damaged_or_missing_snapshots_are_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let config = LogConfig { segment_bytes: 1024, ..LogConfig::default() };
    let mut log = Log::open(&path, config.clone()).unwrap();
    for i in 0..20 {
        log.append_produce(&batch(3, 0, i, 1)).unwrap();
    }
    log.close().unwrap();
    for s in snapshots(&path) {
        let file = path.join(format!("{s:020}.snapshot"));
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[12] ^= 1;
        std::fs::write(&file, bytes).unwrap();
    }
    let mut log = Log::open(&path, config.clone()).unwrap();
    // Rebuilt by scanning from the log start: all five cached batches are found again.
    for i in 15..20 {
        assert_eq!(first_offset(log.append_produce(&batch(3, 0, i, 1)).unwrap()), i as i64);
    }
    assert_eq!(log.end_offset(), 20);
    log.close().unwrap();
    for s in snapshots(&path) {
        std::fs::remove_file(path.join(format!("{s:020}.snapshot"))).unwrap();
    }
    let mut log = Log::open(&path, config).unwrap();
    assert_eq!(first_offset(log.append_produce(&batch(3, 0, 19, 1)).unwrap()), 19);
    assert_eq!(first_offset(log.append_produce(&batch(3, 0, 20, 1)).unwrap()), 20);
    log.close().unwrap();
}

#[test]
fn a_producer_silent_past_the_expiration_is_unknown_after_reopening() {
    // Kafka's producer.id.expiration.ms (1 day, from the batch timestamps): an expired producer
    // is dropped when the state is loaded, and its next batch is taken at any sequence
    // (Kafka 4.x has no UNKNOWN_PRODUCER_ID), so a retry that old is not recognised.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let two_days_ago = kafkalite::log::now_ms() - 2 * kafkalite::producer_state::PRODUCER_ID_EXPIRATION_MS;
    let mut log = Log::open(&path, LogConfig::default()).unwrap();
    assert_eq!(log.append_produce(&batch_at(5, 0, 0, 1, two_days_ago)).unwrap(), Produced::Appended(0, 0));
    assert_eq!(log.append_produce(&batch(6, 0, 0, 1)).unwrap(), Produced::Appended(1, 1));
    log.close().unwrap();
    let mut log = Log::open(&path, LogConfig::default()).unwrap();
    assert_eq!(log.append_produce(&batch(5, 0, 9, 1)).unwrap(), Produced::Appended(2, 2), "any sequence");
    assert!(matches!(log.append_produce(&batch(6, 0, 0, 1)).unwrap(), Produced::Duplicate(_)), "6 is not expired");
    log.close().unwrap();
}
