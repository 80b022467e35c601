//! Syncing appended bytes (`MappedFile::sync_appended`, used by group commit and flush="always"):
//! the written pages' page-table entries are dropped before the msync (one TLB flush instead of
//! one inter-processor interrupt per page at writeback). The bytes must stay the file's, the
//! sync must still cover the dropped pages, appends must go on into the page left mapped, and
//! readers in the same process must read the same bytes through their maps across the drop.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::{mpsc, Arc, Mutex};

use kafkalite::storage::fsync_batch::wait_all;
use kafkalite::storage::mmap::MappedFile;
use kafkalite::{FlushPolicy, Log, LogConfig};

fn page() -> usize {
    // SAFETY: sysconf takes an integer and returns one; it touches no memory of ours.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Whether the page at `addr` of this process is in its page table (/proc/self/pagemap bit 63).
fn present(addr: usize) -> bool {
    let mut entry = [0u8; 8];
    let pagemap = File::open("/proc/self/pagemap").unwrap();
    pagemap.read_exact_at(&mut entry, (addr / page() * 8) as u64).unwrap();
    u64::from_le_bytes(entry) >> 63 == 1
}

/// Which of the map's pages `[first, last)` are in the page table.
fn present_pages(map: &MappedFile, first: usize, last: usize) -> Vec<bool> {
    (first..last).map(|p| present(map.as_ptr() as usize + p * page())).collect()
}

/// Dirty page-cache pages of `file` in `[off, off + len)` (cachestat(2), Linux 6.5+); None
/// where the kernel lacks the call.
fn dirty_pages(file: &File, off: usize, len: usize) -> Option<u64> {
    const SYS_CACHESTAT: libc::c_long = 451; // the same number on every architecture
    let range = [off as u64, len as u64];
    // nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted
    let mut stat = [0u64; 5];
    // SAFETY: the kernel reads 16 bytes from `range` and writes 40 into `stat`, both live
    // locals of exactly those sizes (struct cachestat_range, struct cachestat).
    let rc = unsafe { libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), range.as_ptr(), stat.as_mut_ptr(), 0) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSYS), "cachestat failed: {e}");
        return None;
    }
    Some(stat[1])
}

/// The file's bytes `[0, len)` through read(2), not through any map.
fn file_bytes(path: &std::path::Path, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    File::open(path).unwrap().read_exact(&mut out).unwrap();
    out
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

fn mapped_file(dir: &std::path::Path, pages: usize) -> (File, std::path::PathBuf, Arc<MappedFile>) {
    let path = dir.join("00000000000000000000.log");
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    file.set_len((pages * page()) as u64).unwrap();
    let map = MappedFile::writable(&file, pages * page(), "segment").unwrap();
    (file, path, map)
}

#[test]
fn a_durable_sync_drops_the_written_pages_keeps_the_partial_one_and_syncs_them_all() {
    let p = page();
    let dir = tempfile::tempdir().unwrap();
    let (file, path, map) = mapped_file(dir.path(), 16);
    let data = pattern(9 * p, 0x5a);

    let to = 3 * p + 100;
    map.write(0, &data[..to]);
    assert_eq!(present_pages(&map, 0, 4), [true; 4], "stored pages are mapped");
    map.sync_appended(0, to).unwrap();
    assert_eq!(
        present_pages(&map, 0, 4),
        [false, false, false, true],
        "the whole written pages leave the page table; the partial one, still being appended to, stays"
    );
    assert_eq!(file_bytes(&path, to), data[..to], "dropped pages keep their bytes");
    if let Some(dirty) = dirty_pages(&file, 0, to) {
        assert_eq!(dirty, 0, "the msync wrote back the dropped pages too");
    }

    // Appends go on into the partial page and past it; the next sync starts at the watermark.
    let to2 = 6 * p + 10;
    map.write(to, &data[to..to2]);
    map.sync_appended(to, to2).unwrap();
    assert_eq!(present_pages(&map, 3, 7), [false, false, false, true]);
    assert_eq!(file_bytes(&path, to2), data[..to2]);
    if let Some(dirty) = dirty_pages(&file, 0, to2) {
        assert_eq!(dirty, 0);
    }

    // Appends never store below the watermark; one that did would fault the page in again and
    // still land in the file (correct, only slower).
    map.write(p + 7, &data[..50]);
    let mut expected = data[..to2].to_vec();
    expected[p + 7..p + 57].copy_from_slice(&data[..50]);
    map.sync_appended(0, to2).unwrap();
    assert_eq!(file_bytes(&path, to2), expected);
    if let Some(dirty) = dirty_pages(&file, 0, to2) {
        assert_eq!(dirty, 0);
    }
}

#[test]
fn durable_syncs_of_hostile_ranges_are_refused_or_harmless() {
    let p = page();
    let dir = tempfile::tempdir().unwrap();
    let (file, path, map) = mapped_file(dir.path(), 4);
    let len = map.len();
    let data = pattern(len, 0x33);
    map.write(0, &data);
    // Empty ranges (at 0, inside, at the end): nothing to do.
    for at in [0, 5, p, len] {
        map.sync_appended(at, at).unwrap();
    }
    assert_eq!(present_pages(&map, 0, 4), [true; 4], "an empty range drops nothing");
    // Unaligned, inside one page: no whole page to drop.
    map.sync_appended(3, p - 3).unwrap();
    map.sync_appended(p + 1, 2 * p - 1).unwrap();
    assert_eq!(present_pages(&map, 0, 4), [true; 4], "inside one page: nothing dropped");
    // Unaligned across a page boundary: the page holding `from` is whole below `to`'s.
    map.sync_appended(p - 1, p + 1).unwrap();
    assert_eq!(present_pages(&map, 0, 4), [false, true, true, true]);
    // Refused, with nothing dropped: backwards, past the end.
    for (from, to) in [(3, 2), (0, len + 1), (len + 1, len + 2), (len, len + p)] {
        let e = map.sync_appended(from, to).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{from}..{to}");
    }
    assert_eq!(present_pages(&map, 0, 4), [false, true, true, true]);
    // Up to the end of the map: every page is whole.
    map.sync_appended(0, len).unwrap();
    assert_eq!(present_pages(&map, 0, 4), [false; 4]);
    assert_eq!(file_bytes(&path, len), data);
    if let Some(dirty) = dirty_pages(&file, 0, len) {
        assert_eq!(dirty, 0);
    }
}

fn durable_config(shared_writers: bool) -> LogConfig {
    LogConfig { flush: FlushPolicy::Always, shared_writers, segment_bytes: 8 << 20, ..LogConfig::default() }
}

fn value(i: usize) -> Vec<u8> {
    format!("{i:08}-{}", "v".repeat(90 + i % 37)).into_bytes()
}

/// Every record of `log` from offset 0, as values.
fn values(log: &mut Log) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    log.scan_records(0, None, usize::MAX, &mut out).unwrap();
    out.into_iter().map(|r| r.value.unwrap()).collect()
}

/// The segment's bytes through read(2) equal the batches the log reads through its map.
fn assert_file_matches_map(log: &mut Log, dir: &std::path::Path) {
    let view = log.read(0, usize::MAX).unwrap();
    assert_eq!(view.start, 0);
    let on_file = file_bytes(&dir.join("00000000000000000000.log"), view.len);
    assert!(on_file == view.bytes(), "the file and the writer's map differ");
}

#[test]
fn a_reader_in_the_writers_process_reads_the_same_bytes_across_durable_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("d-0");
    let mut log = Log::open(&part, durable_config(false)).unwrap();
    let first: Vec<Vec<u8>> = (0..60).map(value).collect();
    let refs: Vec<&[u8]> = first.iter().map(Vec::as_slice).collect();
    log.append_values(&refs, 7).unwrap();
    // Held across the syncs below: a view into the writer's own map (as Python's zero-copy
    // reads hold), and a second log of this process reading through its own read-only map.
    let held = log.read(0, usize::MAX).unwrap();
    let before = held.bytes().to_vec();
    let mut reader = Log::open(&part, LogConfig { readonly: true, ..durable_config(false) }).unwrap();
    assert_eq!(values(&mut reader), first);
    // Each append syncs (flush="always"), dropping the pages written in full so far.
    let mut expected = first.clone();
    for i in 60..3000 {
        log.append_values(&[value(i).as_slice()], 7).unwrap();
        expected.push(value(i));
    }
    assert!(log.size_bytes() > 64 * page() as u64, "enough pages for many drops");
    assert_eq!(held.bytes(), before, "a held view reads the same bytes after its pages were dropped");
    assert_eq!(values(&mut log), expected);
    reader.follow().unwrap(); // a reader learns of appends when it follows
    let read = values(&mut reader);
    assert_eq!(read.len(), expected.len(), "a reader's map sees every synced append");
    assert!(read == expected, "a reader's map reads what was appended");
    assert_file_matches_map(&mut log, &part);
}

#[test]
fn durable_syncs_beside_concurrent_appends_lose_no_byte() {
    // Group commit's own shape: one thread appends (under the log's lock) and hands each ticket
    // to a syncing thread, which syncs everything appended so far while the next appends write
    // into the partial last page the sync leaves mapped.
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("c-0");
    let log = Arc::new(Mutex::new(Log::open(&part, durable_config(true)).unwrap()));
    let (tx, rx) = mpsc::channel();
    let syncer = std::thread::spawn(move || {
        let mut synced = 0;
        while let Ok(first) = rx.recv() {
            let mut group = vec![first];
            group.extend(rx.try_iter());
            for result in wait_all(&group, None) {
                result.unwrap();
            }
            synced += group.len();
        }
        synced
    });
    let n = 4000;
    for i in 0..n {
        let mut log = log.lock().unwrap();
        let (_, ticket) = log.defer_durability(|l| l.append_values(&[value(i).as_slice()], 7)).unwrap();
        tx.send(ticket.expect("flush=always hands out a ticket")).unwrap();
    }
    drop(tx);
    assert_eq!(syncer.join().unwrap(), n);
    let mut log = log.lock().unwrap();
    assert_eq!(values(&mut log), (0..n).map(value).collect::<Vec<_>>());
    assert_file_matches_map(&mut log, &part);
}

/// The server's writer (flush="os") appends 200 records of producer 7's open transaction and
/// rolls without a sync: the writer, the sealed segment's file, and its length. None when
/// nothing can show a sync (no cachestat(2) here, or writeback cleaned the pages already).
fn rolled_open_transaction(path: &std::path::Path) -> Option<(Log, File, usize)> {
    let os = LogConfig { flush: FlushPolicy::Os, shared_writers: true, ..LogConfig::default() };
    let mut writer = Log::open(path, os).unwrap();
    writer.set_transactional_producer(Some((7, 0)));
    let batch: Vec<Vec<u8>> = (0..200).map(value).collect();
    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    writer.append_values(&refs, 1).unwrap();
    let len = writer.read(0, usize::MAX).unwrap().len;
    writer.roll().unwrap();
    let sealed = File::open(path.join("00000000000000000000.log")).unwrap();
    matches!(dirty_pages(&sealed, 0, len), Some(dirty) if dirty > 0).then_some((writer, sealed, len))
}

#[test]
fn a_commit_marker_syncs_its_transactions_records_in_a_segment_a_flush_os_writer_rolled() {
    // The server's writer (flush="os") appended a transaction's batch and rolled without a
    // sync, as when a Produce in flight at the end's decision lands after the coordinator synced
    // the transaction's records; the COMMIT marker then goes to the newer segment.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let (_writer, sealed, len) = match rolled_open_transaction(&path) {
        Some(rolled) => rolled,
        None => return,
    };
    // The coordinator's writer (flush="always", as `transactions::Coordinator` opens them).
    let mut coordinator = Log::open(&path, durable_config(true)).unwrap();
    let (written, marker_ticket) = coordinator.defer_durability(|log| log.append_commit_marker(7, 0, 0, 2)).unwrap();
    let (marker, records) = written.expect("the transaction is open, so the marker is written");
    assert_eq!(marker.offset, 200);
    let (mut tickets, _dir) = records.expect("a COMMIT marker names its records' syncs");
    tickets.extend(marker_ticket);
    assert!(wait_all(&tickets, None).into_iter().all(|r| r.is_ok()));
    assert_eq!(dirty_pages(&sealed, 0, len), Some(0), "the committed batch in the rolled segment is unsynced");
}

#[test]
fn an_open_transactions_records_in_a_segment_a_flush_os_writer_rolled_are_synced_at_its_end() {
    // What the coordinator syncs before it records PrepareCommit (`sync_records`): the open
    // transaction's records, here in a segment the server's flush="os" writer rolled without a
    // sync, which the coordinator's own writer found sealed and mapped read-only.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let (mut writer, sealed, len) = match rolled_open_transaction(&path) {
        Some(rolled) => rolled,
        None => return,
    };
    writer.append_values(&[b"more".as_slice()], 1).unwrap(); // the transaction goes on in the new segment
    let mut coordinator = Log::open(&path, durable_config(true)).unwrap();
    let (tickets, _dir) = coordinator.open_txn_durable_tickets(7).unwrap().expect("the transaction is open");
    assert!(wait_all(&tickets, None).into_iter().all(|r| r.is_ok()));
    assert_eq!(dirty_pages(&sealed, 0, len), Some(0), "the open transaction's records in the rolled segment");
}
