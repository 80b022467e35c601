//! Memory maps over segment files: the one place (with the Python buffer) that uses `unsafe`.
//!
//! The invariants that make the maps sound, kept by `segment/` and `log/`:
//! 1. A file is never shrunk below the bytes any reader may touch: a segment is trimmed only
//!    to its *valid* length (the end of its last complete batch), and readers only touch
//!    bytes below the valid length they were given.
//! 2. Published bytes are never written again. The writer only writes past the published end;
//!    a segment's files are replaced (compaction) or removed (retention) by rename/unlink, which
//!    leaves existing maps intact.
//! 3. Mapped regions of the active segment are backed by real blocks (`fallocate`), so a full
//!    disk fails the allocation with an error instead of raising SIGBUS on a store.
//! 4. No other process writes the file while we hold its partition lock, except readers,
//!    which never write.
//!
//! Invariants 1 and 3 hold among kafkalite's own processes. Another process (or a person)
//! may still shrink a mapped file (`truncate`, a full rewrite): that would raise SIGBUS on
//! the next access. `sigbus.rs` turns that into data damage instead of death: every map is
//! registered, the faulting page becomes a zero page, and the map is marked damaged. Readers
//! see zeros (`CorruptRecordError` by the length/CRC checks); writers check `is_damaged`
//! after their stores and fail the append before acknowledging it.

use std::fs::File;
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::storage::error::{IoContext, Result};

/// A shared mapping of one file, readable by any number of holders.
pub struct MappedFile {
    /// Declared first: unregistered before the map is unmapped.
    guard: crate::storage::sigbus::Guard,
    map: MmapRaw,
    /// Mapped from a file opened for writing. A read-only one cannot be synced through the map:
    /// Linux clears VM_SHARED on a shared map of a read-only file, so msync writes nothing back.
    writable: bool,
}

impl MappedFile {
    /// Map `len` bytes of `file` for reading and writing (`MAP_SHARED`).
    pub fn writable(file: &File, len: usize, what: &str) -> Result<Arc<MappedFile>> {
        let map = MmapOptions::new().len(len).map_raw(file).context(|| format!("cannot map {what}"))?;
        Ok(Arc::new(MappedFile {
            guard: crate::storage::sigbus::register(map.as_ptr(), map.len()),
            map,
            writable: true,
        }))
    }

    /// Map `len` bytes of `file` read-only (`MAP_SHARED`), seeing a writer's later stores.
    pub fn readonly(file: &File, len: usize, what: &str) -> Result<Arc<MappedFile>> {
        let map = MmapOptions::new().len(len).map_raw_read_only(file).context(|| format!("cannot map {what}"))?;
        Ok(Arc::new(MappedFile {
            guard: crate::storage::sigbus::register(map.as_ptr(), map.len()),
            map,
            writable: false,
        }))
    }

    /// Whether an msync through this map can write its pages back (`readonly` maps cannot).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// A page of this map was replaced by zeros because its file shrank (see `sigbus.rs`):
    /// stores since may be lost, loads may see zeros.
    #[inline]
    pub fn is_damaged(&self) -> bool {
        self.guard.is_damaged()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Published bytes `[start, end)`. Panics if the range is outside the mapping.
    #[inline]
    pub fn bytes(&self, start: usize, end: usize) -> &[u8] {
        assert!(start <= end && end <= self.map.len(), "read {start}..{end} outside a map of {}", self.map.len());
        // SAFETY: the range lies inside the mapping (checked above) and below the valid length
        // of the file (invariant 1, the callers pass published ranges only), so every page is
        // backed by the file and no SIGBUS can occur. Published bytes are never written again
        // (invariant 2), so no store can alias this shared reference while it lives.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), end - start) }
    }

    /// Raw start address and length, for handing published ranges to Python's buffer protocol.
    pub fn as_ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }

    /// Copy `data` to `[at, at + data.len())`, an unpublished range of a writable map.
    #[inline]
    pub fn write(&self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.map.len(), "write past the end of a map");
        // SAFETY: the range is inside the mapping (checked) and inside the file's allocated
        // blocks (invariant 3: the segment only writes below its fallocated length). Only the
        // writer, which holds the partition lock and `&mut` on its segment, writes; it writes
        // only past the published end, where no reader holds a reference (invariant 2).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(at), data.len()) }
    }

    /// Fault in `[at, at + len)` for writing in one call (MADV_POPULATE_WRITE), instead of
    /// one page fault per 4 KiB page on first store. Best effort: older kernels lack it.
    pub fn prefault_for_write(&self, at: usize, len: usize) {
        if len > 0 {
            let _ = self.map.advise_range(memmap2::Advice::PopulateWrite, at, len);
        }
    }

    /// Unmap `[at, at + len)` from this process's resident set (MADV_DONTNEED), keeping the
    /// bytes: the map is `MAP_SHARED` over a file, so written pages stay in the page cache (and
    /// are written back as before) and a later access faults them in again with the same
    /// contents. The writer drops what lies behind it so that a producer writing a large
    /// segment does not keep every page it wrote resident (issue 14 target 6). Best effort.
    pub fn release(&self, at: usize, len: usize) {
        if len > 0 {
            // SAFETY: DONTNEED discards data only in private or anonymous mappings; this one is a
            // shared file mapping (`map_raw` of a file), where it only drops the page-table
            // entries: the contents stay in the page cache / file, so every reference into the
            // range keeps reading the same bytes (re-faulted on access).
            let _ = unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, at, len) };
        }
    }

    /// The 4-byte word at `at` as an atomic shared with every process that maps the file
    /// (the notifier's futex word). Panics unless `at` is 4-byte aligned and inside the map.
    pub fn atomic_u32(&self, at: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(at.is_multiple_of(4) && at + 4 <= self.map.len(), "atomic word {at} outside or misaligned");
        // SAFETY: the word is inside the map (checked), 4-byte aligned (maps are page-aligned and
        // `at` is a multiple of 4), backed by blocks the notifier wrote at creation, and every
        // process touches it only through atomic operations, so no plain access races with it.
        unsafe { &*(self.map.as_ptr().add(at) as *const std::sync::atomic::AtomicU32) }
    }

    /// The 8-byte word at `at` as an atomic shared with every process that maps the file
    /// (group commit's watermarks). Panics unless `at` is 8-byte aligned and inside the map.
    pub fn atomic_u64(&self, at: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(at.is_multiple_of(8) && at + 8 <= self.map.len(), "atomic word {at} outside or misaligned");
        // SAFETY: the word is inside the map (checked), 8-byte aligned (maps are page-aligned and
        // `at` is a multiple of 8), backed by blocks written when the file was made, and every
        // process touches it only through atomic operations, so no plain access races with it.
        unsafe { &*(self.map.as_ptr().add(at) as *const std::sync::atomic::AtomicU64) }
    }

    /// Make `[from, to)` of an append-only map durable: drop this map's page-table entries of
    /// the whole pages of the range (`written_pages`), then msync the range (`MS_SYNC`, which
    /// writes back and waits for the file's dirty pages in that range, like fdatasync of it).
    ///
    /// The caller promises that every byte below `to` is written and that nobody stores below
    /// `to` again: an appender only writes past the appended end, which is at least `to`.
    /// Only the page holding `to` itself may still be written (the next append fills it), so
    /// it is kept mapped.
    ///
    /// Why drop them: writeback of a page mapped writable must write-protect it first
    /// (`folio_mkclean`), which flushes that page from the TLB of every CPU running this process,
    /// one inter-processor interrupt per 4 KiB page, the appending thread's CPU interrupted each
    /// time (~0.5 CPU s per million acks='all' records, `benches/results/acks-all-zap-*.md`).
    /// MADV_DONTNEED removes the entries of the whole range with one TLB flush, and writeback
    /// then finds the pages unmapped. Dropping is an optimisation: if it fails, the msync still
    /// syncs the same file range.
    pub fn sync_appended(&self, from: usize, to: usize) -> std::io::Result<()> {
        if from > to || to > self.map.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("sync of {from}..{to} outside a map of {}", self.map.len()),
            ));
        }
        if from == to {
            return Ok(());
        }
        if let Some((at, len)) = written_pages(from, to, page_size()) {
            // SAFETY: DONTNEED discards data only in private or anonymous mappings; this one is a
            // shared file mapping (`map_raw` of a file), where it only drops the page-table
            // entries of `[at, at + len)`: the pages stay in the page cache, a dirty entry's
            // dirty bit moves to its page (so the msync below still writes it), and every
            // reference into the range keeps reading the same bytes (re-faulted on access, from
            // the page cache). The range is whole pages inside the map (`written_pages`, and `to`
            // is checked above) below `to`'s page, where the caller guarantees no append stores
            // any more (appends write at or past `to`; the page holding `to` is left mapped). A
            // store there all the same would fault the page in again and land in the page cache:
            // correct, only slower.
            let _ = unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, at, len) };
        }
        self.map.flush_range(from, to - from)
    }
}

/// The whole pages of `[from, to)` that are written in full: from the start of the page holding
/// `from` (its bytes before `from` were written before) to the start of the page holding `to`
/// (excluded: the next append writes into it). None when that is no page at all. `page` is a
/// power of two.
fn written_pages(from: usize, to: usize, page: usize) -> Option<(usize, usize)> {
    let (start, end) = (from & !(page - 1), to & !(page - 1));
    (end > start).then(|| (start, end - start))
}

/// The size of a memory page (4 KiB on x86-64; 16 or 64 KiB on some ARM kernels).
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf takes an integer and returns one; it touches no memory of ours.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if n > 0 && (n as usize).is_power_of_two() {
            n as usize
        } else {
            4096
        }
    })
}

#[cfg(test)]
mod tests {
    use super::written_pages;

    #[test]
    fn written_pages_are_the_whole_pages_below_the_page_holding_the_end() {
        const P: usize = 4096;
        assert_eq!(written_pages(0, 0, P), None, "empty at 0");
        assert_eq!(written_pages(5, 5, P), None, "empty inside a page");
        assert_eq!(written_pages(0, P - 1, P), None, "one partial page");
        assert_eq!(written_pages(3, P - 3, P), None, "unaligned inside one page");
        assert_eq!(written_pages(0, P, P), Some((0, P)), "`to` at a page end: that page is whole");
        assert_eq!(written_pages(P - 1, P + 1, P), Some((0, P)), "the page holding `from` is written below it");
        assert_eq!(written_pages(P + 1, 3 * P + 5, P), Some((P, 2 * P)));
        assert_eq!(written_pages(2 * P, 2 * P, P), None, "empty at a page boundary");
        assert_eq!(written_pages(0, 16 * P, P), Some((0, 16 * P)), "up to the end of a map");
        assert_eq!(written_pages(1, 65536 + 1, 65536), Some((0, 65536)), "64 KiB pages");
    }
}
