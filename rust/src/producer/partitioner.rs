//! How a producer picks a record's partition, as Kafka's Java client does: a keyed record by
//! murmur2 (the Java client's `Utils.murmur2`), `(murmur2(key) & 0x7fffffff) % partitions`; a
//! keyless record by the sticky partitioner (`BuiltInPartitioner`, KIP-480/KIP-794).

/// Kafka's 32-bit MurmurHash2 variant, seed 0x9747b28c.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = 0x9747_b28c ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner gives a non-null key.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) as u32) & 0x7fff_ffff) % partitions
}

/// Kafka's `BuiltInPartitioner` for keyless records: they all go to one partition until
/// `batch_size` bytes were produced to it (the record that reaches it included), then to
/// another partition chosen at random (never the same one, as kafka-python's sticky partitioner
/// does, so every switch spreads the load). So a stream of keyless records fills one batch per
/// partition at a time and spreads evenly over the partitions, for single sends and bulk
/// appends alike.
#[derive(Clone, Debug)]
pub struct StickyPartitioner {
    partitions: u32,
    batch_size: usize,
    current: u32,
    produced: usize,
    rng: u64,
}

impl StickyPartitioner {
    /// `seed` makes the sequence of partitions reproducible (the caller passes a random one).
    pub fn new(partitions: u32, batch_size: usize, seed: u64) -> Self {
        let mut s = StickyPartitioner {
            partitions: partitions.max(1),
            batch_size: batch_size.max(1),
            current: 0,
            produced: 0,
            // xorshift needs a non-zero state; mix the seed so nearby seeds diverge at once.
            rng: (seed ^ 0x9e37_79b9_7f4a_7c15).max(1),
        };
        s.current = (s.next_random() % u64::from(s.partitions)) as u32;
        s
    }

    /// The partition the next keyless record goes to.
    pub fn current(&self) -> u32 {
        self.current
    }

    /// Count a record of `bytes` (its encoded size upper bound) appended to `current()`; once
    /// the partition got `batch_size` bytes, move on to another one.
    pub fn appended(&mut self, bytes: usize) {
        self.produced += bytes;
        if self.produced >= self.batch_size {
            self.switch();
        }
    }

    /// Place records of the given sizes in order: `(partition, start, end)` runs of consecutive
    /// records (`start..end`), each run about `batch_size` bytes (the last one may be shorter and
    /// continues with the next records).
    pub fn runs(&mut self, sizes: impl IntoIterator<Item = usize>) -> Vec<(u32, usize, usize)> {
        let mut out: Vec<(u32, usize, usize)> = Vec::new();
        for (i, bytes) in sizes.into_iter().enumerate() {
            match out.last_mut() {
                Some((p, _, end)) if *p == self.current && *end == i => *end = i + 1,
                _ => out.push((self.current, i, i + 1)),
            }
            self.appended(bytes);
        }
        out
    }

    fn switch(&mut self) {
        self.produced = 0;
        if self.partitions > 1 {
            // Uniform among the other partitions: skip over the current one.
            let pick = (self.next_random() % u64::from(self.partitions - 1)) as u32;
            self.current = if pick >= self.current { pick + 1 } else { pick };
        }
    }

    /// xorshift64*: fast, and plenty for spreading load (not for anything secret).
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_runs_fill_a_batch_then_move_to_another_partition() {
        let mut s = StickyPartitioner::new(4, 1000, 7);
        let runs = s.runs(std::iter::repeat_n(100, 95));
        // 10 records of 100 bytes fill a batch of 1000: runs of 10, each on another partition.
        assert_eq!(runs.len(), 10);
        for (i, (p, start, end)) in runs.iter().enumerate() {
            assert_eq!((*start, *end), (i * 10, (i * 10 + 10).min(95)));
            if i > 0 {
                assert_ne!(*p, runs[i - 1].0);
            }
            assert!(*p < 4);
        }
        // The last run continues: 5 more records stay where the 95th went.
        let next = s.runs([100; 5]);
        assert_eq!(next, vec![(runs[9].0, 0, 5)]);
    }

    #[test]
    fn one_partition_always_stays() {
        let mut s = StickyPartitioner::new(1, 10, 1);
        assert!(s.runs([100; 50]).iter().all(|r| r.0 == 0));
    }
}
