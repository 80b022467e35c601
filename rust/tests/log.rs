//! The partition log end to end: append, read, roll, reopen, recovery, indexes, retention.

use std::fs::{self, OpenOptions};
use std::io::Write;

use kafkalite::storage::record::{OwnedRecord, RecordInput};
use kafkalite::{Error, Log, LogConfig};

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig { segment_bytes, ..LogConfig::default() }
}

fn values(n: usize, tag: &str) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{tag}-{i:06}-{}", "x".repeat(80)).into_bytes()).collect()
}

fn append(log: &mut Log, vals: &[Vec<u8>], ts: i64) -> (i64, i64) {
    let refs: Vec<&[u8]> = vals.iter().map(|v| v.as_slice()).collect();
    log.append_values(&refs, ts).unwrap()
}

fn all(log: &mut Log) -> Vec<OwnedRecord> {
    let mut out = Vec::new();
    let start = log.start_offset();
    log.scan_records(start, None, usize::MAX, &mut out).unwrap();
    out
}

#[test]
fn append_read_roll_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events-0");
    let mut log = Log::open(&path, config(16 * 1024)).unwrap();
    let mut expected = Vec::new();
    for round in 0..20 {
        let vals = values(50, &format!("r{round}"));
        let (first, last) = append(&mut log, &vals, 1000 + round);
        assert_eq!((first, last), (round * 50, round * 50 + 49));
        expected.extend(vals);
    }
    assert!(log.segments().len() > 3, "should have rolled: {:?}", log.segments());
    let got: Vec<Vec<u8>> = all(&mut log).into_iter().map(|r| r.value.unwrap()).collect();
    assert_eq!(got, expected);
    log.close().unwrap();
    // Closed segments are trimmed: each .log ends exactly at its last batch.
    for entry in fs::read_dir(&path).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "log") {
            let len = fs::metadata(&p).unwrap().len();
            assert!(len <= 16 * 1024, "{} is {len} bytes", p.display());
        }
    }
    let mut log = Log::open(&path, config(16 * 1024)).unwrap();
    assert!(log.recovery_reports().is_empty());
    assert_eq!(log.end_offset(), 1000);
    let got: Vec<Vec<u8>> = all(&mut log).into_iter().map(|r| r.value.unwrap()).collect();
    assert_eq!(got, expected);
    // Every offset reads back through the index.
    for offset in (0..1000).step_by(37) {
        let mut one = Vec::new();
        log.scan_records(offset, None, 1, &mut one).unwrap();
        assert_eq!(one[0].offset, offset);
    }
}

#[test]
fn rebuilt_indexes_equal_live_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = Log::open(&path, config(64 * 1024)).unwrap();
    for round in 0..200 {
        append(&mut log, &values(7, &format!("{round}")), 5000 + (round % 13) * 10);
    }
    log.close().unwrap();
    let snapshot = |suffix: &str| -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
            .collect();
        files.sort();
        files
    };
    let live_index = snapshot(".index");
    let live_time = snapshot(".timeindex");
    assert!(live_index.iter().any(|(_, b)| !b.is_empty()));
    for (name, _) in live_index.iter().chain(&live_time) {
        fs::remove_file(path.join(name)).unwrap();
    }
    let log = Log::open(&path, config(64 * 1024)).unwrap();
    drop(log);
    assert_eq!(snapshot(".index"), live_index);
    assert_eq!(snapshot(".timeindex"), live_time);
}

#[test]
fn recovery_truncates_torn_tail_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = Log::open(&path, config(1 << 20)).unwrap();
    append(&mut log, &values(100, "a"), 1);
    log.close().unwrap();
    drop(log);
    let seg = path.join("00000000000000000000.log");
    let good_len = fs::metadata(&seg).unwrap().len();
    // Unclean: no marker, plus a half-written batch of garbage at the end.
    fs::remove_file(path.join(".kafkalite-clean-shutdown")).unwrap();
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 1, 0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]).unwrap();
    drop(f);
    let mut log = Log::open(&path, config(1 << 20)).unwrap();
    let reports = log.recovery_reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].valid_bytes, good_len);
    assert_eq!(reports[0].dropped_bytes, 23);
    assert_eq!(all(&mut log).len(), 100);
    assert_eq!(log.end_offset(), 100);
    append(&mut log, &values(5, "b"), 2);
    assert_eq!(all(&mut log).len(), 105);
}

#[test]
fn flipped_bit_is_detected_and_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = Log::open(&path, config(1 << 20)).unwrap();
    for i in 0..10 {
        append(&mut log, &values(10, &format!("{i}")), 1);
    }
    log.close().unwrap();
    drop(log);
    let seg = path.join("00000000000000000000.log");
    let mut bytes = fs::read(&seg).unwrap();
    let batch = bytes.len() / 10;
    bytes[batch * 5 + 100] ^= 0x10; // inside the 6th batch
    fs::write(&seg, &bytes).unwrap();
    fs::remove_file(path.join(".kafkalite-clean-shutdown")).unwrap();
    let mut log = Log::open(&path, config(1 << 20)).unwrap();
    assert_eq!(log.recovery_reports().len(), 1);
    assert!(log.recovery_reports()[0].reason.as_deref().unwrap().contains("CRC"));
    assert_eq!(log.end_offset(), 50);
    assert_eq!(all(&mut log).len(), 50);
}

#[test]
fn second_writer_is_refused_readers_see_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut writer = Log::open(&path, config(8 * 1024)).unwrap();
    append(&mut writer, &values(10, "a"), 1);
    match Log::open(&path, config(8 * 1024)) {
        Err(Error::Locked { holder, .. }) => {
            assert!(holder.contains(&std::process::id().to_string()))
        }
        other => panic!("expected Locked, got {:?}", other.err()),
    }
    let mut reader = Log::open(&path, LogConfig { readonly: true, ..config(8 * 1024) }).unwrap();
    assert_eq!(reader.end_offset(), 10);
    for i in 0..30 {
        append(&mut writer, &values(10, &format!("{i}")), 1);
    }
    let mut got = Vec::new();
    reader.scan_records(0, None, usize::MAX, &mut got).unwrap();
    assert!(got.len() >= 10);
    reader.follow().unwrap();
    assert_eq!(reader.end_offset(), 310);
    assert_eq!(all(&mut reader).len(), 310);
    writer.close().unwrap();
    reader.follow().unwrap();
    assert_eq!(all(&mut reader).len(), 310);
}

#[test]
fn retention_and_delete_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let cfg = LogConfig { retention_bytes: Some(20_000), retention_ms: Some(60_000), ..config(8 * 1024) };
    let mut log = Log::open(&path, cfg.clone()).unwrap();
    for i in 0..40 {
        append(&mut log, &values(10, &format!("{i}")), 1_000_000 + i);
    }
    let before = log.size_bytes();
    let view = log.read(0, 1 << 20).unwrap();
    let first_bytes = view.bytes().to_vec();
    let deleted = log.enforce_retention_at(1_000_000).unwrap();
    assert!(deleted > 0);
    assert!(log.size_bytes() <= 20_000 + 8 * 1024 && log.size_bytes() < before);
    assert_eq!(log.start_offset(), log.segments()[0].base_offset);
    // A view taken before deletion still reads the same bytes.
    assert_eq!(view.bytes(), &first_bytes[..]);
    assert!(matches!(log.read(0, 100), Err(Error::OffsetOutOfRange { .. })));
    // delete_records_before inside a segment moves the start without deleting it.
    let target = log.start_offset() + 3;
    log.delete_records_before(target).unwrap();
    assert_eq!(all(&mut log)[0].offset, target);
    log.close().unwrap();
    let mut log = Log::open(&path, cfg).unwrap();
    assert_eq!(log.start_offset(), target);
    // Time retention removes everything, leaving one empty active segment at the end.
    log.enforce_retention_at(10_000_000).unwrap();
    assert_eq!(log.start_offset(), 400);
    assert_eq!(log.end_offset(), 400);
    append(&mut log, &values(1, "z"), 1);
    assert_eq!(all(&mut log)[0].offset, 400);
}

#[test]
fn offset_for_timestamp_finds_earliest_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path().join("t-0"), config(8 * 1024)).unwrap();
    for i in 0..100 {
        append(&mut log, &values(5, "v"), 10_000 + i * 100);
    }
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 10_000)));
    assert_eq!(log.offset_for_timestamp(10_050).unwrap(), Some((5, 10_100)));
    assert_eq!(log.offset_for_timestamp(19_900).unwrap(), Some((495, 19_900)));
    assert_eq!(log.offset_for_timestamp(19_901).unwrap(), None);
}

#[test]
fn records_with_keys_headers_and_zstd() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig { compression: kafkalite::storage::record::Compression::Zstd, ..config(1 << 20) };
    let mut log = Log::open(dir.path().join("t-0"), cfg).unwrap();
    let headers = [("h1", Some(&b"x"[..])), ("ключ", None)];
    let recs = [
        RecordInput { key: Some(b"k"), value: Some(b"v"), headers: &headers, timestamp: 5 },
        RecordInput { key: None, value: None, headers: &[], timestamp: 3 },
        RecordInput { key: Some(b""), value: Some(b""), headers: &[], timestamp: 9 },
    ];
    assert_eq!(log.append_records(&recs).unwrap(), (0, 2));
    let got = all(&mut log);
    assert_eq!(got[0].headers, vec![("h1".to_string(), Some(b"x".to_vec())), ("ключ".to_string(), None)]);
    assert_eq!((got[1].key.clone(), got[1].value.clone(), got[1].timestamp), (None, None, 3));
    assert_eq!((got[2].key.clone(), got[2].value.clone()), (Some(vec![]), Some(vec![])));
}

#[test]
fn raw_batches_are_validated_and_reoffset() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = Log::open(dir.path().join("a-0"), config(1 << 20)).unwrap();
    append(&mut src, &values(10, "s"), 7);
    let raw = src.read(0, 1 << 20).unwrap().bytes().to_vec();
    let mut dst = Log::open(dir.path().join("b-0"), config(1 << 20)).unwrap();
    append(&mut dst, &values(3, "d"), 7);
    assert_eq!(dst.append_raw_batches(&raw).unwrap(), (3, 12));
    let mut bad = raw.clone();
    bad[70] ^= 1;
    assert!(matches!(dst.append_raw_batches(&bad), Err(Error::Corrupt(_))));
    assert!(matches!(dst.append_raw_batches(&raw[..raw.len() - 1]), Err(Error::Corrupt(_))));
    assert_eq!(dst.end_offset(), 13);
    // The batch is stored from the caller's bytes, and its own baseOffset field is not trusted
    // (a client may send anything there): the file holds the assigned offset.
    let mut odd = raw.clone();
    odd[..8].copy_from_slice(&1_000_000i64.to_be_bytes());
    assert_eq!(dst.append_raw_batches(&odd).unwrap(), (13, 22));
    let stored = dst.read(13, 1 << 20).unwrap().bytes().to_vec();
    assert_eq!(i64::from_be_bytes(stored[..8].try_into().unwrap()), 13);
    drop(dst);
    let mut reopened = Log::open(dir.path().join("b-0"), config(1 << 20)).unwrap();
    assert_eq!(reopened.end_offset(), 23);
    assert_eq!(all(&mut reopened).iter().map(|r| r.offset).collect::<Vec<_>>(), (0..23).collect::<Vec<i64>>());
}

#[test]
fn rolls_on_segment_ms_and_on_a_full_index() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig { segment_ms: Some(1000), ..config(1 << 20) };
    let mut log = Log::open(dir.path().join("a-0"), cfg).unwrap();
    append(&mut log, &values(3, "a"), 10_000);
    append(&mut log, &values(3, "b"), 10_900);
    assert_eq!(log.segments().len(), 1);
    append(&mut log, &values(3, "c"), 11_001); // more than segment_ms after the first batch
    assert_eq!(log.segments().iter().map(|s| s.base_offset).collect::<Vec<_>>(), vec![0, 6]);

    // An offset index of 2 entries (16 bytes) fills after three ~4 KiB appends.
    let cfg = LogConfig { max_index_bytes: 16, index_interval_bytes: 100, ..config(1 << 20) };
    let mut log = Log::open(dir.path().join("b-0"), cfg.clone()).unwrap();
    for i in 0..6 {
        append(&mut log, &values(5, &format!("{i}")), 1 + i);
    }
    assert!(log.segments().len() >= 2, "{:?}", log.segments());
    let n = all(&mut log).len();
    assert_eq!(n, 30);
}

#[test]
fn shared_writers_interleave_batches_and_follow_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let cfg = LogConfig { shared_writers: true, ..config(8 * 1024) };
    let mut a = Log::open(&path, cfg.clone()).unwrap();
    let mut b = Log::open(&path, cfg.clone()).unwrap();
    // An exclusive writer cannot join, and a shared one cannot join an exclusive writer.
    assert!(matches!(Log::open(&path, config(8 * 1024)), Err(Error::Locked { .. })));
    let mut expected = Vec::new();
    for i in 0..60 {
        let (w, tag) = if i % 3 == 0 { (&mut b, "b") } else { (&mut a, "a") };
        let vals = values(7, &format!("{tag}{i}"));
        let (first, _) = append(w, &vals, i);
        assert_eq!(first, expected.len() as i64, "offsets are assigned once, in one order");
        expected.extend(vals);
    }
    assert!(a.segments().len() > 3);
    for w in [&mut a, &mut b] {
        w.follow().unwrap();
        let got: Vec<Vec<u8>> = all(w).into_iter().map(|r| r.value.unwrap()).collect();
        assert_eq!(got, expected);
    }
    // Retention by one writer is seen by the other.
    a.delete_records_before(100).unwrap();
    append(&mut b, &values(1, "z"), 1);
    assert_eq!(b.start_offset(), 100);
    a.close().unwrap();
    assert!(!path.join(".kafkalite-clean-shutdown").exists(), "b is still writing");
    b.close().unwrap();
    assert!(path.join(".kafkalite-clean-shutdown").exists(), "the last writer out seals the partition");
    let mut x = Log::open(&path, config(8 * 1024)).unwrap();
    assert_eq!(x.end_offset(), expected.len() as i64 + 1);
    assert!(x.recovery_reports().is_empty());
    assert_eq!(all(&mut x).len(), expected.len() + 1 - 100);
}

#[test]
fn shared_writers_opening_at_the_same_moment_all_get_in() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("r{round}-0"));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut log = Log::open(&path, LogConfig { shared_writers: true, ..config(4096) }).unwrap();
                    append(&mut log, &values(5, &format!("t{t}")), 1);
                    log.close().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut log = Log::open(&path, config(4096)).unwrap();
        assert_eq!(all(&mut log).len(), 40);
        assert!(log.recovery_reports().is_empty(), "the last writer out sealed the partition");
    }
}

/// A writer whose partition directory was deleted (renamed away, as `delete_topic` does) or
/// deleted and created again refuses to append, with `UnknownTopicOrPartition`; closing it
/// still succeeds, and nothing lands in the renamed folder.
#[test]
fn appends_into_a_deleted_partition_directory_are_refused() {
    for shared_writers in [true, false] {
        for recreate in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("events-0");
            let mut log = Log::open(&path, LogConfig { shared_writers, ..config(16 * 1024) }).unwrap();
            append(&mut log, &values(3, "before"), 1);
            let doomed = dir.path().join("events-0.0123-delete");
            fs::rename(&path, &doomed).unwrap();
            if recreate {
                fs::create_dir(&path).unwrap();
            }
            let refs: Vec<&[u8]> = vec![b"after"];
            let err = log.append_values(&refs, 2).unwrap_err();
            assert!(matches!(err, Error::UnknownTopicOrPartition(_)), "{err:?}");
            log.close().unwrap();
            let mut old = Log::open(&doomed, LogConfig { readonly: true, ..config(16 * 1024) }).unwrap();
            assert_eq!(all(&mut old).len(), 3);
        }
    }
}

/// Sealed segments hold no descriptor, for a writer (exclusive or shared) and a reader, and
/// the reader still follows the writer's appends and rolls (issue 9, point 10).
#[test]
fn sealed_segments_hold_no_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events-0");
    let mut log = Log::open(&path, config(16 * 1024)).unwrap();
    for round in 0..30 {
        append(&mut log, &values(1, &format!("r{round}")), 1000 + round);
        log.roll().unwrap();
    }
    assert_eq!(log.segments().len(), 31);
    // An exclusive writer between appends: nothing, not even the active segment's log.
    assert_eq!(log.segment_descriptors(), 0);
    let mut reader = Log::open(&path, LogConfig { readonly: true, ..config(16 * 1024) }).unwrap();
    assert!(reader.segment_descriptors() <= 1, "{}", reader.segment_descriptors());
    append(&mut log, &values(1, "after"), 2000);
    log.roll().unwrap();
    append(&mut log, &values(1, "last"), 2001);
    reader.follow().unwrap();
    assert_eq!(reader.end_offset(), 32);
    assert_eq!(all(&mut reader).len(), 32);
    assert!(reader.segment_descriptors() <= 1, "{}", reader.segment_descriptors());
    log.close().unwrap();
    let shared = Log::open(&path, LogConfig { shared_writers: true, ..config(16 * 1024) }).unwrap();
    assert!(shared.segment_descriptors() <= 1, "{}", shared.segment_descriptors());
}

/// Rss of this process's mappings that start at `addrs` (/proc/self/smaps), in bytes.
fn mappings_rss(addrs: &[usize]) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut total = 0;
    for addr in addrs {
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&format!("{addr:x}-")));
        let rss_kb = lines.find_map(|l| l.strip_prefix("Rss:")).unwrap_or_else(|| panic!("no mapping at {addr:x}"));
        total += rss_kb.trim().trim_end_matches(" kB").parse::<usize>().unwrap() * 1024;
    }
    total
}

/// One batch of 1 MB: 100 values of 10 kB (few records, so a debug build appends fast).
fn megabyte() -> Vec<Vec<u8>> {
    (0..100).map(|i| format!("{i:03}{}", "m".repeat(10_000 - 3)).into_bytes()).collect()
}

/// Where the map of `log`'s active segment starts.
fn active_map(log: &mut Log) -> usize {
    let last = log.end_offset() - 1;
    log.read(last, 1).unwrap().map.expect("the active segment is mapped").as_ptr() as usize
}

#[test]
fn a_writer_keeps_only_a_window_of_its_segment_resident() {
    // 68 MB in 1 MB batches into one segment: the reserve on disk grows in steps of up to
    // 16 MiB, but what is faulted in follows the writer (2 MiB windows, RESIDENT_WINDOW in
    // segment/writer.rs: under one behind it plus up to two ahead, ~7 MiB; the bound leaves
    // room for a loaded machine). Before, a whole step was faulted in ahead and one kept
    // behind: up to 32 MiB of this mapping resident.
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path().join("w-0"), config(1 << 30)).unwrap();
    let batch = megabyte();
    let mut peak = 0;
    for _ in 0..72 {
        append(&mut log, &batch, 7);
        peak = peak.max(mappings_rss(&[active_map(&mut log)]));
    }
    assert!(log.size_bytes() > 64 << 20);
    assert!(peak <= 16 << 20, "{peak} bytes of the segment resident");
    // Dropped pages are still the file's: everything reads back.
    assert_eq!(all(&mut log).len(), 7_200);
}

#[test]
fn many_partitions_written_at_once_share_the_pages_faulted_in_ahead() {
    // 32 partitions written in turn, 8 MB each in 1 MB batches. Each writer's window ahead is
    // up to 4 MiB, but all of them together are capped at 32 MiB (prealloc::FAULTED_AHEAD_LIMIT,
    // shared with any other test of this process), so the 32 segments hold what their writers
    // stored since their last release (under 3 MiB each) plus 32 MiB, not 32 full windows.
    let dir = tempfile::tempdir().unwrap();
    let mut logs: Vec<Log> =
        (0..32).map(|p| Log::open(dir.path().join(format!("m-{p}")), config(1 << 30)).unwrap()).collect();
    let batch = megabyte();
    let mut peak = 0;
    for _ in 0..8 {
        for log in logs.iter_mut() {
            append(log, &batch, 7);
        }
        let maps: Vec<usize> = logs.iter_mut().map(active_map).collect();
        peak = peak.max(mappings_rss(&maps));
    }
    assert!(peak <= (32 * 3 + 32) << 20, "{} MiB of 32 segments resident", peak >> 20);
    assert!(logs.iter_mut().all(|log| all(log).len() == 800));
}
