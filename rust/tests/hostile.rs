//! Hostile bytes: whatever the input, scanning and decoding return a value or an error,
//! never a panic, and never allocate beyond what the input can justify.

use kafkalite::storage::record::scan::{next_batch, Next};
use kafkalite::storage::record::{decode_batch_owned, BatchBuilder, Compression, RecordInput};
use proptest::prelude::*;

fn valid_batch(n: usize, compression: Compression) -> Vec<u8> {
    let mut b = BatchBuilder::new(compression, None, 0);
    let headers = [("h", Some(&b"v"[..]))];
    for i in 0..n {
        let v = vec![i as u8; i % 40];
        b.push(&RecordInput { key: Some(b"key"), value: Some(&v), headers: &headers, timestamp: i as i64 });
    }
    b.finish(7).unwrap().0
}

/// Scan and decode everything in `bytes` without checking CRCs, so that corrupted record
/// areas reach the record decoder too.
fn exercise(bytes: &[u8]) {
    let mut pos = 0;
    while let Ok(Next::Batch(h)) = next_batch(bytes, pos, false) {
        let _ = decode_batch_owned(&bytes[pos..], &h);
        pos += h.total_size();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        exercise(&bytes);
    }

    #[test]
    fn mutated_batches_never_panic(
        n in 1usize..20,
        zstd in any::<bool>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut bytes = valid_batch(n, if zstd { Compression::Zstd } else { Compression::None });
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        exercise(&bytes);
        // With CRC checking on, a mutation of covered bytes is always caught.
        if let Ok(Next::Batch(h)) = next_batch(&bytes, 0, true) {
            prop_assert!(decode_batch_owned(&bytes, &h).is_ok());
        }
    }

    #[test]
    fn huge_counts_and_lengths_are_refused(count in any::<i32>(), length in any::<i32>()) {
        let mut bytes = valid_batch(3, Compression::None);
        bytes[57..61].copy_from_slice(&count.to_be_bytes());
        exercise(&bytes);
        bytes[8..12].copy_from_slice(&length.to_be_bytes());
        exercise(&bytes);
    }
}
