//! What one segment's files hold, judged by the engine's own rules: the batches recovery keeps,
//! where and why it stops, and whether a writer trusts the segment's indexes or rebuilds them.
//! `kafkalite dump-log` prints this (python/kafkalite/dump.py through `py/inspect.rs`), so the
//! dump reports what recovery would do instead of parsing the files with rules of its own.
//!
//! The rules are `record::scan::next_batch` (Kafka's `nextBatch` + `ensureValid`), the
//! "offsets follow" check of `Segment::rescan`, the entry order of `index::IndexFile`, the
//! trusted-load index checks of `Segment::check_indexes`, and Kafka's own index sanity check
//! (`OffsetIndex`/`TimeIndex.sanityCheck`, DumpLogSegments `--index-sanity-check`).
//! `Segment::rescan` and `check_indexes` are meant to call `scan_log` and `index_problems`
//! (both in `segment/recovery.rs`); until then `tests/cli/test_dump.py` checks that this module
//! and a real recovery agree on every kind of damage it injects.

use std::path::Path;

use crate::storage::error::{IoContext, Result};
use crate::storage::index::{Entry, OffsetPosition, TimestampOffset};
use crate::storage::record::header::BatchHeader;
use crate::storage::record::scan::{next_batch, Next};

/// One batch found by `scan_log`.
#[derive(Debug, Clone)]
pub struct ScannedBatch {
    pub position: usize,
    pub header: BatchHeader,
    /// Whether its CRC-32C matches (false only for the batch recovery stops at).
    pub crc_ok: bool,
}

impl ScannedBatch {
    /// The codec's name, or its number when it is none Kafka defines (attributes bits 0-2).
    pub fn codec_name(&self) -> String {
        self.header.compression().map_or_else(|_| (self.header.attributes & 7).to_string(), |c| c.name().to_string())
    }
}

/// A `.log` file read the way recovery reads it.
#[derive(Debug, Clone)]
pub struct LogScan {
    /// The batches recovery keeps, then the one it stops at when that one has a readable header.
    pub batches: Vec<ScannedBatch>,
    /// Bytes from the start that recovery keeps.
    pub valid_bytes: usize,
    pub file_len: usize,
    /// Why recovery stops before the end, when non-zero bytes follow the valid ones (a zero
    /// tail is a preallocated file's unwritten space, not damage).
    pub damage: Option<String>,
    /// `file_len - valid_bytes` when any of those bytes is non-zero, else 0.
    pub damaged_bytes: usize,
    /// The offset after the last kept batch (`base_offset` for none).
    pub next_offset: i64,
}

/// Scan `bytes`, the `.log` of a segment based at `base_offset`, as `Segment::rescan` does:
/// whole, CRC-valid batches whose offsets follow each other and fit the segment's 32-bit
/// relative offsets, up to the first one that is not.
pub fn scan_log(bytes: &[u8], base_offset: i64) -> LogScan {
    let mut batches = Vec::new();
    let mut pos = 0usize;
    let mut next_offset = base_offset;
    let mut reason = None;
    loop {
        match next_batch(bytes, pos, true) {
            Ok(Next::Batch(h)) => {
                if h.base_offset < next_offset || h.last_offset() - base_offset > i32::MAX as i64 {
                    reason = Some(format!(
                        "batch at position {pos} has offsets {}..={} that do not follow offset {} in a segment based at {base_offset}",
                        h.base_offset,
                        h.last_offset(),
                        next_offset - 1,
                    ));
                    batches.push(ScannedBatch { position: pos, header: h, crc_ok: true });
                    break;
                }
                next_offset = h.next_offset();
                batches.push(ScannedBatch { position: pos, header: h, crc_ok: true });
                pos += h.total_size();
            }
            Ok(Next::End) | Ok(Next::Zeros) => {
                if pos < bytes.len() && bytes[pos..].iter().any(|&b| b != 0) {
                    reason = Some(format!("incomplete batch at position {pos}"));
                }
                break;
            }
            Err(e) => {
                // Show the batch that failed when its header still reads (a bad CRC).
                if let Ok(Next::Batch(h)) = next_batch(bytes, pos, false) {
                    batches.push(ScannedBatch { position: pos, header: h, crc_ok: false });
                }
                reason = Some(e.to_string());
                break;
            }
        }
    }
    let damaged = bytes[pos..].iter().any(|&b| b != 0);
    LogScan {
        batches,
        valid_bytes: pos,
        file_len: bytes.len(),
        damage: if damaged { reason } else { None },
        damaged_bytes: if damaged { bytes.len() - pos } else { 0 },
        next_offset,
    }
}

/// Whole entries of an index file, up to the first that does not increase (where
/// `IndexFile` cuts), and whether all bytes after them are zero (a preallocated tail).
fn entries<E: Entry>(raw: &[u8]) -> (Vec<E>, bool) {
    let mut out: Vec<E> = Vec::new();
    for chunk in raw.chunks_exact(E::SIZE) {
        let e = E::decode(chunk);
        if out.last().is_some_and(|prev| !e.increases_from(prev)) {
            break;
        }
        out.push(e);
    }
    let rest = &raw[(out.len() * E::SIZE).min(raw.len())..];
    (out, rest.iter().all(|&b| b == 0))
}

/// What a segment's indexes say and what is wrong with them.
#[derive(Debug, Clone, Default)]
pub struct IndexReport {
    pub index_entries: usize,
    pub time_entries: usize,
    pub problems: Vec<String>,
}

/// Check a segment's `.index` (`index`) and `.timeindex` (`timeindex`) against its `.log`
/// (`log`, scanned into `scan`): Kafka's sanity rules, then the engine's, each problem being
/// one that makes a writer rebuild the indexes instead of trusting them.
pub fn index_problems(log: &[u8], scan: &LogScan, base_offset: i64, index: &[u8], timeindex: &[u8]) -> IndexReport {
    let mut problems = kafka_sanity_problems(base_offset, index, timeindex);
    let (offsets, offsets_tail_zero) = entries::<OffsetPosition>(index);
    let (times, times_tail_zero) = entries::<TimestampOffset>(timeindex);
    if !offsets_tail_zero {
        problems.push(format!(
            "offset index entry {} does not increase from the one before (a writer cuts the index there)",
            offsets.len()
        ));
    }
    if !times_tail_zero {
        problems.push(format!(
            "time index entry {} does not increase from the one before (a writer cuts the index there)",
            times.len()
        ));
    }
    // `Segment::check_indexes`: each offset entry points at a batch ending with its offset.
    for e in &offsets {
        let offset = base_offset + e.relative_offset as i64;
        let ok = (e.position as usize) < scan.file_len
            && matches!(next_batch(log, e.position as usize, false), Ok(Next::Batch(h)) if h.last_offset() == offset);
        if !ok {
            problems.push(format!(
                "index entry (offset {offset}, position {}) does not point at a batch ending there",
                e.position
            ));
            break;
        }
    }
    let last_relative = scan.next_offset - base_offset;
    if let Some(e) = times.iter().find(|e| e.relative_offset as i64 >= last_relative.max(1)) {
        problems.push(format!(
            "time index entry (timestamp {}, offset {}) is past the segment's last offset {}",
            e.timestamp,
            base_offset + e.relative_offset as i64,
            scan.next_offset - 1
        ));
    }
    IndexReport { index_entries: offsets.len(), time_entries: times.len(), problems }
}

/// Kafka's index sanity rules (`OffsetIndex`/`TimeIndex.sanityCheck`, what a broker checks
/// before trusting an index and DumpLogSegments `--index-sanity-check` reports as
/// CorruptIndexException): whole entries only, the last entry's offset not below the base
/// offset (relative offsets are signed 32-bit), the last timestamp not below the first.
pub fn kafka_sanity_problems(base_offset: i64, index: &[u8], timeindex: &[u8]) -> Vec<String> {
    let be_i32 = |b: &[u8], at: usize| i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    let be_i64 = |b: &[u8], at: usize| i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let mut problems = Vec::new();
    if !index.len().is_multiple_of(OffsetPosition::SIZE) {
        problems.push(format!("CorruptIndexException: offset index size {} is not a multiple of 8", index.len()));
    } else if !index.is_empty() {
        let last = base_offset + be_i32(index, index.len() - 8) as i64;
        if last < base_offset {
            problems.push(format!(
                "CorruptIndexException: offset index has last offset {last} below the base offset {base_offset}"
            ));
        }
    }
    if !timeindex.len().is_multiple_of(TimestampOffset::SIZE) {
        problems.push(format!("CorruptIndexException: time index size {} is not a multiple of 12", timeindex.len()));
    } else if !timeindex.is_empty() {
        let first_ts = be_i64(timeindex, 0);
        let last_ts = be_i64(timeindex, timeindex.len() - 12);
        let last = base_offset + be_i32(timeindex, timeindex.len() - 4) as i64;
        if last_ts < first_ts {
            problems.push(format!(
                "CorruptIndexException: time index last timestamp {last_ts} is below its first {first_ts}"
            ));
        }
        if last < base_offset {
            problems.push(format!(
                "CorruptIndexException: time index has last offset {last} (timestamp {last_ts}) below the base offset {base_offset}"
            ));
        }
    }
    problems
}

/// Whether `bytes` are whole batches with following offsets when CRCs are not checked: what
/// a writer's trusted load of a cleanly closed segment checks (`Segment::load_trusted`, which
/// does not read the records, so a flipped record byte passes it).
fn whole_without_crc(bytes: &[u8], base_offset: i64) -> bool {
    let (mut pos, mut next) = (0usize, base_offset);
    while let Ok(Next::Batch(h)) = next_batch(bytes, pos, false) {
        if h.base_offset < next || h.last_offset() - base_offset > i32::MAX as i64 {
            return false;
        }
        next = h.next_offset();
        pos += h.total_size();
    }
    pos == bytes.len()
}

/// A segment's `.log` and indexes, inspected.
#[derive(Debug, Clone)]
pub struct SegmentInspection {
    pub base_offset: i64,
    pub log: LogScan,
    pub indexes: IndexReport,
    /// Missing index files, by name (a writer rebuilds them).
    pub missing: Vec<String>,
    /// What a writer opening the partition does with the damaged bytes (`damaged_bytes > 0`).
    pub recovery: Option<String>,
}

/// What `Log::open` does with a segment's damage (its recovery rule, in log/load.rs): the last
/// segment is recovered, so cut at the valid end, unless a clean shutdown was recorded and
/// the segment passes the trusted load; a segment with a successor keeps its bytes.
fn recovery_verdict(scan: &LogScan, base_offset: i64, is_last: bool, trusted: bool) -> Option<String> {
    let reason = scan.damage.as_ref()?;
    let what =
        format!("{} bytes after the last valid batch at position {} ({reason})", scan.damaged_bytes, scan.valid_bytes);
    let kept = format!("reading from offset {} on in this segment raises CorruptRecordError", scan.next_offset);
    Some(if !is_last {
        format!("{what}: the segment has a successor, so recovery keeps them (sealed) and {kept}")
    } else if trusted {
        format!(
            "{what}: a clean shutdown is recorded and the batches' lengths and offsets hold, so a writer trusts segment {base_offset} without recovery and {kept}; remove {} to make recovery cut them",
            crate::storage::files::CLEAN_SHUTDOWN_FILE
        )
    } else {
        format!("{what}: recovery truncates the segment to {} bytes, dropping them", scan.valid_bytes)
    })
}

fn read_optional(path: &Path, what: &str) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    match crate::storage::nofollow::open_read(path, what) {
        Ok(mut f) => {
            let mut out = Vec::new();
            f.read_to_end(&mut out).context(|| format!("cannot read {}", path.display()))?;
            Ok(Some(out))
        }
        Err(crate::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Inspect the segment whose `.log` is `log_path` (named by its base offset, as Kafka names
/// segments) and the `.index`/`.timeindex` beside it; `is_last` says whether it is the
/// partition's last segment. Files are opened without following links.
pub fn inspect_segment(log_path: &Path, is_last: bool) -> Result<SegmentInspection> {
    let stem = log_path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let base_offset =
        stem.parse::<i64>().ok().filter(|b| *b >= 0 && log_path.extension().is_some_and(|e| e == "log")).ok_or_else(
            || {
                crate::Error::config(format!(
                    "{} is not a segment: a segment is named <base offset>.log, e.g. 00000000000000000000.log",
                    log_path.display()
                ))
            },
        )?;
    let log = read_optional(log_path, "segment")?.ok_or_else(|| {
        crate::Error::io(
            format!("cannot open segment {}", log_path.display()),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        )
    })?;
    let scan = scan_log(&log, base_offset);
    let mut missing = Vec::new();
    let mut read_index = |ext: &str| -> Result<Vec<u8>> {
        let path = log_path.with_extension(ext);
        Ok(read_optional(&path, "index")?.unwrap_or_else(|| {
            missing.push(path.display().to_string());
            Vec::new()
        }))
    };
    let index = read_index("index")?;
    let timeindex = read_index("timeindex")?;
    let indexes = index_problems(&log, &scan, base_offset, &index, &timeindex);
    let clean = log_path.with_file_name(crate::storage::files::CLEAN_SHUTDOWN_FILE).exists();
    let trusted = clean && missing.is_empty() && indexes.problems.is_empty() && whole_without_crc(&log, base_offset);
    let recovery = recovery_verdict(&scan, base_offset, is_last, trusted);
    Ok(SegmentInspection { base_offset, log: scan, indexes, missing, recovery })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::record::{BatchBuilder, Compression, RecordInput};

    fn batch(base: i64, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None, None, 0);
        for _ in 0..n {
            b.push(&RecordInput { key: None, value: Some(b"v"), headers: &[], timestamp: 1 });
        }
        b.finish(base).unwrap().0
    }

    #[test]
    fn stops_where_recovery_stops() {
        let mut log = batch(0, 2);
        log.extend(batch(2, 1));
        let good = log.len();
        assert_eq!(scan_log(&log, 0).valid_bytes, good);
        assert!(scan_log(&log, 0).damage.is_none());
        // A zero tail is unwritten space; a torn batch is damage.
        let mut zeros = log.clone();
        zeros.extend([0u8; 100]);
        let s = scan_log(&zeros, 0);
        assert_eq!((s.valid_bytes, s.damaged_bytes, s.damage.is_none()), (good, 0, true));
        let mut torn = log.clone();
        torn.extend(&batch(3, 1)[..30]);
        assert_eq!(scan_log(&torn, 0).damaged_bytes, 30);
        // A bad CRC stops the scan at that batch, which is still listed.
        let mut bad = log.clone();
        let at = batch(0, 2).len() + 62; // in the second batch's records, under its CRC
        bad[at] ^= 0xff;
        let s = scan_log(&bad, 0);
        assert_eq!(s.valid_bytes, batch(0, 2).len());
        assert_eq!(s.batches.iter().map(|b| b.crc_ok).collect::<Vec<_>>(), [true, false]);
        // Offsets that go back stop it too.
        let mut back = log.clone();
        back.extend(batch(1, 1));
        assert_eq!(scan_log(&back, 0).valid_bytes, good);
    }

    #[test]
    fn index_entries_must_point_at_their_batches() {
        let mut log = batch(0, 2);
        log.extend(batch(2, 1));
        let scan = scan_log(&log, 0);
        let entry = |rel: u32, pos: u32| [rel.to_be_bytes(), pos.to_be_bytes()].concat();
        let second = batch(0, 2).len() as u32;
        assert!(index_problems(&log, &scan, 0, &entry(2, second), &[]).problems.is_empty());
        assert_eq!(index_problems(&log, &scan, 0, &entry(1, second), &[]).problems.len(), 1);
        assert_eq!(index_problems(&log, &scan, 0, &entry(2, 10_000), &[]).problems.len(), 1);
        // A preallocated zero tail is not a problem.
        let mut tail = entry(2, second);
        tail.extend([0u8; 16]);
        assert!(index_problems(&log, &scan, 0, &tail, &[]).problems.is_empty());
    }
}
