//! Idempotent appends through `Log::append_produce`: retries found at their original offsets
//! across writers and reopenings, and the producer snapshots' lifecycle (roll, close,
//! retention, damage).

use kafkalite::storage::log::Produced;
use kafkalite::storage::producer_state::Refusal;
use kafkalite::storage::record::scan::{next_batch, Next};
use kafkalite::storage::record::{
    decode_batch_owned, BatchBuilder, BatchHeader, Compression, ProducerStamp, RecordInput,
};
use kafkalite::{Log, LogConfig};

/// A v2 batch of `n` records as an idempotent producer sends it.
fn batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    batch_at(pid, epoch, seq, n, kafkalite::storage::log::now_ms())
}

fn batch_at(pid: i64, epoch: i16, seq: i32, n: usize, timestamp: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, None, 1024);
    let value = [b'v'; 100];
    for _ in 0..n {
        b.push(&RecordInput { key: None, value: Some(&value), headers: &[], timestamp });
    }
    b.set_producer(ProducerStamp::new(pid, epoch, seq).unwrap());
    b.finish(0).unwrap().0
}

fn shared(segment_bytes: u64) -> LogConfig {
    LogConfig { segment_bytes, shared_writers: true, ..LogConfig::default() }
}

fn snapshots(dir: &std::path::Path) -> Vec<i64> {
    kafkalite::storage::producer_state::list_snapshots(dir).unwrap()
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
    let two_days_ago =
        kafkalite::storage::log::now_ms() - 2 * kafkalite::storage::producer_state::PRODUCER_ID_EXPIRATION_MS;
    let mut log = Log::open(&path, LogConfig::default()).unwrap();
    assert_eq!(log.append_produce(&batch_at(5, 0, 0, 1, two_days_ago)).unwrap(), Produced::Appended(0, 0));
    assert_eq!(log.append_produce(&batch(6, 0, 0, 1)).unwrap(), Produced::Appended(1, 1));
    log.close().unwrap();
    let mut log = Log::open(&path, LogConfig::default()).unwrap();
    assert_eq!(log.append_produce(&batch(5, 0, 9, 1)).unwrap(), Produced::Appended(2, 2), "any sequence");
    assert!(matches!(log.append_produce(&batch(6, 0, 0, 1)).unwrap(), Produced::Duplicate(_)), "6 is not expired");
    log.close().unwrap();
}

/// The headers of the whole batches in `data`, each CRC verified by the engine's own decoder
/// (`next_batch` with the check on, as recovery and reads use it), with their records.
fn decoded(data: &[u8]) -> Vec<(BatchHeader, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let Next::Batch(h) = next_batch(data, pos, true).unwrap() else { panic!("no whole batch at {pos}") };
        let records = decode_batch_owned(&data[pos..pos + h.total_size()], &h).unwrap();
        out.push((h, records.into_iter().map(|r| r.value.unwrap()).collect()));
        pos += h.total_size();
    }
    out
}

#[test]
fn encoded_batches_carry_the_producer_and_each_batch_the_sequence_of_its_first_record() {
    let dir = tempfile::tempdir().unwrap();
    // Batches of at most 1 KiB: 100-byte values make several, across the sequence wrap.
    let config = LogConfig { max_message_bytes: 1024, compression: Compression::Zstd, ..LogConfig::default() };
    let log = Log::open(dir.path().join("t-0"), config).unwrap();
    let values: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 100]).collect();
    let inputs: Vec<RecordInput<'_>> =
        values.iter().map(|v| RecordInput { key: None, value: Some(v), headers: &[], timestamp: 7 }).collect();
    let first = i32::MAX - 12;
    let data = log.encode_batches(&inputs, ProducerStamp::new(42, 3, first).unwrap(), false).unwrap();
    let batches = decoded(&data);
    assert!(batches.len() > 2, "several batches: {}", batches.len());
    let mut records = 0i64;
    let mut seen = Vec::new();
    for (h, batch_values) in &batches {
        assert_eq!((h.producer_id, h.producer_epoch), (42, 3));
        assert_eq!(h.base_offset, records, "offsets relative to the first record");
        // Kafka's sequence: the first record's, wrapping from i32::MAX to 0.
        assert_eq!(h.base_sequence as i64, (first as i64 + records) % (1i64 << 31));
        assert_eq!(h.compression().unwrap(), Compression::Zstd);
        assert!(h.total_size() <= 1024);
        records += h.records_count as i64;
        seen.extend(batch_values.iter().cloned());
    }
    assert_eq!(seen, values);
    assert!(batches.iter().any(|(h, _)| h.base_sequence < 12), "the run crossed the wrap");
    // Without a producer: Kafka's "none" (-1) in all three fields.
    let plain = log.encode_batches(&inputs[..1], ProducerStamp::NONE, false).unwrap();
    let (h, _) = &decoded(&plain)[0];
    assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (-1, -1, -1));
    assert!(ProducerStamp::new(42, -1, 0).is_err() && ProducerStamp::new(-2, -1, -1).is_err());
}

#[test]
fn the_same_stamped_batches_appended_twice_are_a_duplicate_and_leave_the_log_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let config = LogConfig { max_message_bytes: 1024, shared_writers: true, ..LogConfig::default() };
    let mut log = Log::open(&path, config.clone()).unwrap();
    let values: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 100]).collect();
    let inputs: Vec<RecordInput<'_>> =
        values.iter().map(|v| RecordInput { key: None, value: Some(v), headers: &[], timestamp: 7 }).collect();
    let producer = ProducerStamp::new(9, 0, 0).unwrap();
    let data = log.encode_batches(&inputs[..3], producer, false).unwrap();
    assert_eq!(log.append_produce(&data).unwrap(), Produced::Appended(0, 2));
    let end = log.end_offset();
    let bytes = log.read(0, 1 << 20).unwrap().bytes().to_vec();
    // The replay, through another writer that learns the first append from the log.
    let mut other = Log::open(&path, config).unwrap();
    assert!(matches!(other.append_produce(&data).unwrap(), Produced::Duplicate(b) if b.first_offset() == 0));
    assert!(matches!(log.append_produce(&data).unwrap(), Produced::Duplicate(_)));
    assert_eq!((log.end_offset(), other.end_offset()), (end, end));
    assert_eq!(other.read(0, 1 << 20).unwrap().bytes(), &bytes[..], "nothing written");
    // What the log would refuse on append is refused when encoding, before any append.
    let big = vec![0u8; 2048];
    let too_large = [RecordInput { key: None, value: Some(&big), headers: &[], timestamp: 7 }];
    assert!(matches!(log.encode_batches(&too_large, producer, false), Err(kafkalite::Error::RecordTooLarge { .. })));
    // The rest of the rows, several batches, continue the sequence; skipping rows is refused.
    let rest = log.encode_batches(&inputs[3..], producer.advanced(3), false).unwrap();
    assert!(decoded(&rest).len() > 1);
    let gap = log.encode_batches(&inputs[4..], producer.advanced(4), false).unwrap();
    assert!(matches!(other.append_produce(&gap).unwrap(), Produced::Refused(Refusal::OutOfOrderSequence(_))));
    assert_eq!(other.append_produce(&rest).unwrap(), Produced::Appended(3, 19));
    log.close().unwrap();
    other.close().unwrap();
}
