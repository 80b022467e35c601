//! read_committed in the engine: aborted transactions from markers and `.txnindex`, the last
//! stable offset, and the incremental cache following appends.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use kafkalite::storage::read_committed::{read_txn_index, AbortedTxn, TxnState};
use kafkalite::storage::record::header::{compute_crc, ATTR_CONTROL, ATTR_TRANSACTIONAL};
use kafkalite::storage::record::{BatchBuilder, Compression, OwnedRecord, RecordInput};
use kafkalite::{Error, Log, LogConfig};

const A: i64 = 1000;
const B: i64 = 2000;

/// One batch at `base` of `values` (transactional when `pid` is given), or a marker.
fn batch(base: i64, values: &[String], pid: Option<i64>, control: Option<i16>) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, None, 1024);
    let marker_key = control.map(|kind| [0u8, 0, (kind >> 8) as u8, kind as u8]);
    let marker_value = [0u8, 0, 0, 0, 0, 0];
    if let Some(key) = &marker_key {
        b.push(&RecordInput { key: Some(key), value: Some(&marker_value), headers: &[], timestamp: 1 });
    } else {
        for v in values {
            b.push(&RecordInput { key: Some(b"k"), value: Some(v.as_bytes()), headers: &[], timestamp: 1 });
        }
    }
    let (mut bytes, mut header) = b.finish(base).unwrap();
    if let Some(pid) = pid {
        header.attributes |= ATTR_TRANSACTIONAL;
        header.producer_id = pid;
        header.producer_epoch = 0;
        header.base_sequence = 0;
    }
    if control.is_some() {
        header.attributes |= ATTR_CONTROL;
    }
    header.write(&mut bytes);
    header.crc = compute_crc(&bytes);
    header.write(&mut bytes);
    bytes
}

/// Appends steps to `<dir>/00000000000000000000.log`, as a broker stores them.
struct Script {
    dir: std::path::PathBuf,
    offset: i64,
}

impl Script {
    fn new(dir: &Path) -> Script {
        fs::create_dir_all(dir).unwrap();
        for ext in ["log", "index", "timeindex"] {
            fs::File::create(dir.join(format!("{:020}.{ext}", 0))).unwrap();
        }
        Script { dir: dir.to_path_buf(), offset: 0 }
    }

    fn write(&mut self, bytes: &[u8], offsets: i64) {
        let mut f = OpenOptions::new().append(true).open(self.dir.join(format!("{:020}.log", 0))).unwrap();
        f.write_all(bytes).unwrap();
        self.offset += offsets;
    }

    fn data(&mut self, pid: Option<i64>, n: usize) {
        let values: Vec<String> = (0..n).map(|i| format!("v{}", self.offset + i as i64)).collect();
        self.write(&batch(self.offset, &values, pid, None), n as i64);
    }

    fn marker(&mut self, pid: i64, commit: bool) {
        self.write(&batch(self.offset, &[], Some(pid), Some(commit as i16)), 1);
    }
}

fn values(records: &[OwnedRecord]) -> Vec<String> {
    records.iter().map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap()).collect()
}

fn readonly() -> LogConfig {
    LogConfig { readonly: true, ..LogConfig::default() }
}

#[test]
fn aborted_records_hidden_and_reads_stop_at_the_lso() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tx-0");
    let mut s = Script::new(&path);
    s.data(None, 1); // 0
    s.data(Some(A), 2); // 1-2 aborted
    s.data(Some(B), 1); // 3 committed
    s.marker(A, false); // 4
    s.data(None, 1); // 5
    s.data(Some(A), 1); // 6: A's next transaction, left open
    s.marker(B, true); // 7
    s.data(None, 1); // 8

    let mut log = Log::open(&path, readonly()).unwrap();
    let mut txn = TxnState::new();
    let mut out = Vec::new();
    let next = txn.scan_committed(&mut log, 0, None, usize::MAX, &mut out).unwrap();
    assert_eq!(values(&out), ["v0", "v3", "v5"]);
    assert_eq!((next, txn.last_stable_offset(&log)), (6, 6));
    assert_eq!(
        txn.aborted_transactions(),
        [AbortedTxn { producer_id: A, first_offset: 1, last_offset: 4, last_stable_offset: 3 }]
    );
    // One record per call: positions move past aborted batches and markers.
    let (mut pos, mut one_by_one) = (0, Vec::new());
    while pos < 6 {
        pos = txn.scan_committed(&mut log, pos, None, 1, &mut one_by_one).unwrap();
    }
    assert_eq!(values(&one_by_one), ["v0", "v3", "v5"]);
    // A commits: the cache learns the new batches only, and reads go on to the end.
    s.marker(A, true); // 9
    let mut rest = Vec::new();
    let next = txn.scan_committed(&mut log, 6, None, usize::MAX, &mut rest).unwrap();
    assert_eq!(values(&rest), ["v6", "v8"]);
    assert_eq!((next, txn.last_stable_offset(&log)), (10, 10));
    // Out of range is the same error as a read_uncommitted read.
    assert!(matches!(txn.scan_committed(&mut log, 11, None, 1, &mut rest), Err(Error::OffsetOutOfRange { .. })));
}

#[test]
fn txnindex_files_are_parsed_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.txnindex");
    assert!(read_txn_index(&path).unwrap().is_empty()); // missing: no entries
    let mut entry = vec![0u8, 0];
    for v in [A, 3i64, 9, 10] {
        entry.extend_from_slice(&v.to_be_bytes());
    }
    fs::write(&path, &entry).unwrap();
    assert_eq!(
        read_txn_index(&path).unwrap(),
        [AbortedTxn { producer_id: A, first_offset: 3, last_offset: 9, last_stable_offset: 10 }]
    );
    fs::write(&path, &entry[..33]).unwrap();
    assert!(matches!(read_txn_index(&path), Err(Error::Corrupt(m)) if m.contains("multiple of 34")));
    entry[1] = 1;
    fs::write(&path, &entry).unwrap();
    assert!(matches!(read_txn_index(&path), Err(Error::Corrupt(m)) if m.contains("version 1")));
}

#[test]
fn a_log_start_inside_an_aborted_batch_hides_the_rest_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tx-0");
    let mut s = Script::new(&path);
    s.data(None, 1); // 0
    s.data(Some(A), 3); // 1-3 aborted
    s.data(None, 1); // 4
    s.marker(A, false); // 5
                        // DeleteRecords to offset 2: the log starts inside A's aborted batch.
    fs::write(path.join(".kafkalite-log-start-offset"), b"2").unwrap();
    let mut log = Log::open(&path, readonly()).unwrap();
    assert_eq!(log.start_offset(), 2);
    let mut txn = TxnState::new();
    let mut out = Vec::new();
    txn.scan_committed(&mut log, 2, None, usize::MAX, &mut out).unwrap();
    assert_eq!(values(&out), ["v4"]);
    assert_eq!(txn.last_stable_offset(&log), 6);
}
