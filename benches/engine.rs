//! Where the append and read time goes, without Python: `cargo bench --bench engine`.
//! Each stage is timed on the same 100-byte values in batches of 1,000.

use std::time::Instant;

use kafkalite::storage::arrow::ArrowSink;
use kafkalite::storage::record::header::compute_crc;
use kafkalite::storage::record::{BatchBuilder, Compression, ValueInput};
use kafkalite::{Log, LogConfig};

/// Let the kernel finish writing back earlier phases so they do not steal this one's cores.
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

fn rate(label: &str, started: Instant, records: usize, bytes: usize) {
    let s = started.elapsed().as_secs_f64();
    println!("{label:<28} {:>12.0} records/s {:>8.0} MB/s", records as f64 / s, bytes as f64 / s / 1e6);
}

/// One uncompressed batch of `values`, as `Log::append_values` builds it.
fn build_batch(values: &[&[u8]]) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, None, 110_000);
    for &value in values {
        b.push_encoded(&ValueInput { value, timestamp: 1 });
    }
    b.finish(0).unwrap().0
}

fn main() {
    let batches = std::env::var("BATCHES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000usize);
    let value = vec![b'v'; 100];
    let values: Vec<&[u8]> = (0..1000).map(|_| value.as_slice()).collect();
    let records = batches * 1000;

    settle();
    let t = Instant::now();
    let mut bytes = 0;
    for _ in 0..batches {
        bytes += build_batch(&values).len();
    }
    rate("encode + crc", t, records, bytes);

    let dir = tempfile::tempdir().unwrap();
    let batch = build_batch(&values);
    settle();
    let t = Instant::now();
    {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.path().join("plain")).unwrap();
        for _ in 0..batches {
            f.write_all(&batch).unwrap();
        }
    }
    rate("plain write()", t, records, batches * batch.len());
    std::fs::remove_file(dir.path().join("plain")).unwrap();

    // The floor of any append of these batches: the plain write() above plus the CRC32C that
    // Kafka's format puts in every batch (computed as the engine does). Encoding the records
    // from their values, and Python handing them over, come on top of this.
    settle();
    let t = Instant::now();
    {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.path().join("plain")).unwrap();
        for _ in 0..batches {
            std::hint::black_box(compute_crc(std::hint::black_box(&batch)));
            f.write_all(&batch).unwrap();
        }
    }
    rate("floor: crc32c + write()", t, records, batches * batch.len());
    std::fs::remove_file(dir.path().join("plain")).unwrap();

    // The ceiling of any mmap append here: copy the same prebuilt batches into a shared map
    // over fallocated blocks, prefaulted one step ahead on a helper thread, as segments do.
    settle();
    {
        use kafkalite::storage::mmap::MappedFile;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("m"))
            .unwrap();
        let total = batches * batch.len();
        let step = 16 << 20;
        let t = Instant::now();
        let map = MappedFile::writable(&f, total.next_multiple_of(step) + step, "probe").unwrap();
        let (mut reserved, mut pos) = (0usize, 0usize);
        let mut helper: Option<std::thread::JoinHandle<()>> = None;
        for _ in 0..batches {
            while pos + batch.len() + step / 2 > reserved {
                rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), reserved as u64, step as u64).unwrap();
                if let Some(h) = helper.take() {
                    h.join().unwrap();
                }
                let (m, at) = (map.clone(), reserved);
                helper = Some(std::thread::spawn(move || m.prefault_for_write(at, step)));
                reserved += step;
            }
            map.write(pos, &batch);
            pos += batch.len();
        }
        rate("ceiling: memcpy into map", t, records, total);
        if let Some(h) = helper.take() {
            h.join().unwrap();
        }
    }
    std::fs::remove_file(dir.path().join("m")).unwrap();

    settle();
    let mut log = Log::open(dir.path().join("t-0"), LogConfig::default()).unwrap();
    let t = Instant::now();
    let mut lap = Instant::now();
    let verbose = std::env::var("LAPS").is_ok();
    for i in 0..batches {
        log.append_values(&values, i as i64).unwrap();
        if verbose && i % 1000 == 999 {
            eprint!("{:.0} ", 108.0 / lap.elapsed().as_secs_f64());
            lap = Instant::now();
        }
    }
    rate("Log::append_values", t, records, log.size_bytes() as usize);

    settle();
    let t = Instant::now();
    let mut offset = 0;
    let mut rows = 0;
    while offset < log.end_offset() {
        let mut sink = ArrowSink::with_capacity(65536, 65536 * 100);
        offset = log.scan_records(offset, None, 65536, &mut sink).unwrap();
        rows += sink.finish().unwrap().num_rows();
    }
    rate("scan_records -> Arrow", t, rows, log.size_bytes() as usize);
}
