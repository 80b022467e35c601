//! The topic metadata journal, `.kafkalite-topics.journal`: the changes made since the snapshot
//! (`.kafkalite-topics.json`) was last written, so that creating, deleting or altering one topic
//! appends one small entry instead of rewriting every topic.
//!
//! Layout (all integers big-endian):
//! - a 16-byte header: the magic `KLTJ`, the format version (u32, 1), and the journal's
//!   generation (u64). The snapshot names the generation whose entries it does not hold yet
//!   (its `"journal"` key, 0 when absent); a journal of an older generation is already folded
//!   into the snapshot and is ignored.
//! - then entries back to back: payload length (u32), CRC-32C of the payload (u32), payload.
//!   A payload is a JSON object patching the snapshot: `{"topics": {name: entry or null}}` and/or
//!   `{"config": {...}}` (the data directory's whole config). An entry holds a topic's whole
//!   entry, so replaying one twice changes nothing.
//!
//! A header is only ever written whole (a new journal is written to a temp file and renamed),
//! so a damaged header is hand damage. An entry cut short or failing its CRC can only be the
//! tail a killed or failed append left: readers stop before it, and the next writer (under the
//! admin lock) cuts it off before it appends.
//!
//! This module knows the bytes; `metadata_file.rs` decides when to read, append and compact.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde_json::Value;

use crate::storage::error::{Error, IoContext, Result};
use crate::storage::record::header::crc32c;

const MAGIC: &[u8; 4] = b"KLTJ";
const VERSION: u32 = 1;
/// The header's length: magic, version, generation.
pub const HEADER_LEN: u64 = 16;
/// Length and CRC before each payload.
const ENTRY_OVERHEAD: usize = 8;
/// No single change comes near this; a larger length is a damaged tail, not an allocation.
const MAX_PAYLOAD: usize = 64 << 20;

/// The header of a journal of `generation`.
pub fn header(generation: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN as usize);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&generation.to_be_bytes());
    out
}

/// The generation of the journal `file` at `path`.
pub fn read_generation(file: &File, path: &Path) -> Result<u64> {
    let mut buf = [0u8; HEADER_LEN as usize];
    let n = read_at_most(file, &mut buf, 0, path)?;
    if n < buf.len() || &buf[..4] != MAGIC || buf[4..8] != VERSION.to_be_bytes() {
        return Err(Error::CorruptMetadata(format!(
            "{} has a damaged header (not a kafkalite topic journal of version {VERSION}); restore the data \
             directory's topic files from a backup or re-create the topics",
            path.display()
        )));
    }
    Ok(u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes")))
}

/// One entry as appended: length, CRC, payload.
pub fn encode_entry(patch: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(patch).expect("a JSON value serializes");
    let mut out = Vec::with_capacity(ENTRY_OVERHEAD + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c(&payload).to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

/// How many bytes the entry `bytes` starts with takes, framing included (`ENTRY_OVERHEAD` while
/// its frame is incomplete); None when its length marks a tail: zero (a crash can leave the
/// journal longer than what reached the disk, reading as zeros, and the empty payload's CRC-32C
/// is 0, so zeros would pass the CRC) or more than any change.
fn entry_len(bytes: &[u8]) -> Option<usize> {
    let Some(frame) = bytes.get(..4) else { return Some(ENTRY_OVERHEAD) };
    let len = u32::from_be_bytes(frame.try_into().expect("4 bytes")) as usize;
    (1..=MAX_PAYLOAD).contains(&len).then_some(ENTRY_OVERHEAD + len)
}

/// The entries of `bytes` (read from journal position `start`), up to the first one that is
/// incomplete, fails its CRC or has an impossible length, and the position where the complete
/// ones end. A CRC-valid entry that is not a JSON object is damage, named by position.
fn decode_entries(bytes: &[u8], start: u64, path: &Path) -> Result<(Vec<Value>, u64)> {
    let mut entries = Vec::new();
    let mut at = 0usize;
    while let Some(whole) = entry_len(&bytes[at..]) {
        if bytes.len() - at < whole {
            break;
        }
        let crc = u32::from_be_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let (body, len) = (at + ENTRY_OVERHEAD, whole - ENTRY_OVERHEAD);
        if crc32c(&bytes[body..body + len]) != crc {
            break;
        }
        let patch: Value = serde_json::from_slice(&bytes[body..body + len]).map_err(|e| damaged(path, start, at, e))?;
        if !patch.is_object() {
            return Err(damaged(path, start, at, "not a JSON object"));
        }
        entries.push(patch);
        at = body + len;
    }
    Ok((entries, start + at as u64))
}

fn damaged(path: &Path, start: u64, at: usize, why: impl std::fmt::Display) -> Error {
    Error::CorruptMetadata(format!(
        "{} is damaged (the entry at byte {}: {why}); restore the data directory's topic files from a backup or \
         re-create the topics",
        path.display(),
        start + at as u64
    ))
}

/// Read at a time while the entries go on (a few syscalls for a journal about to be compacted).
const CHUNK: usize = 1 << 20;

/// The entries of the journal `file` from position `start` to its end (its length as `fstat`
/// says now), as `decode_entries`, and where they end. Read a chunk at a time and no further
/// than the entries go: the length of a sparse or hostile file says nothing about its bytes (a
/// journal claiming a terabyte must not be allocated, nor its zeros read).
pub fn read_entries(file: &File, start: u64, path: &Path) -> Result<(Vec<Value>, u64)> {
    let len = file.metadata().context_at(path, || format!("cannot stat {}", path.display()))?.len();
    let (mut entries, mut end, mut pending) = (Vec::new(), start, Vec::new());
    loop {
        let (mut found, valid) = decode_entries(&pending, end, path)?;
        entries.append(&mut found);
        pending.drain(..(valid - end) as usize);
        end = valid;
        // Stopped for want of bytes (not at a tail that more bytes would not mend): read on.
        let Some(whole) = entry_len(&pending).filter(|&whole| pending.len() < whole) else { break };
        let from = end + pending.len() as u64;
        let want = (whole - pending.len()).max(CHUNK).min(len.saturating_sub(from) as usize);
        if want == 0 {
            break;
        }
        let had = pending.len();
        pending.resize(had + want, 0);
        let n = read_at_most(file, &mut pending[had..], from, path)?;
        pending.truncate(had + n);
        if n == 0 {
            break;
        }
    }
    Ok((entries, end))
}

fn read_at_most(file: &File, buf: &mut [u8], from: u64, path: &Path) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], from + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io_at(path, format!("cannot read {}", path.display()), e)),
        }
    }
    Ok(n)
}

/// Append `entry` at `end` (where the valid entries end: a torn tail after it is cut off first)
/// and make it durable. A write that fails part-way is cut back to `end`, so a half-written
/// entry never stays in front of the next one. An entry written whole stays even when its sync
/// fails (readers may have seen it; it is reported as a failure that may have taken effect, like
/// a rename whose directory sync fails): entries are only ever removed whole, by compaction, so
/// the position a reader stopped at is always the start of an entry.
pub fn append(file: &File, end: u64, entry: &[u8], path: &Path) -> Result<()> {
    let failed = |e: std::io::Error| Error::io_at(path, format!("cannot append to {}", path.display()), e);
    let write = || -> std::io::Result<()> {
        crate::storage::failpoint::hit("topics.journal.append")?;
        if file.metadata()?.len() != end {
            file.set_len(end)?; // a tail a killed append left
        }
        let half = entry.len() / 2;
        file.write_all_at(&entry[..half], end)?;
        crate::storage::failpoint::hit("topics.journal.mid_entry")?;
        file.write_all_at(&entry[half..], end + half as u64)
    };
    write().map_err(|e| {
        if let Err(cut) = file.set_len(end) {
            ::log::warn!(target: "kafkalite::admin", "cannot cut the failed append off {}: {cut}", path.display());
        }
        failed(e)
    })?;
    crate::storage::failpoint::hit("topics.journal.sync").and_then(|()| file.sync_data()).map_err(failed)
}

/// Replace the journal at `dir/name` by an empty one of `generation`: written to a temp file,
/// synced and renamed over it, so a reader sees the old journal or the new one, never neither.
pub fn replace(dir: &Path, name: &str, generation: u64) -> Result<()> {
    crate::storage::checkpoint::write_atomically(dir, name, &header(generation))
}

/// Tests build journals by hand with this.
#[cfg(test)]
pub fn write_entry(mut out: impl std::io::Write, patch: &Value) -> std::io::Result<()> {
    out.write_all(&encode_entry(patch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_stop_at_a_torn_or_crc_bad_tail() {
        let p = Path::new("j");
        let mut bytes = Vec::new();
        write_entry(&mut bytes, &json!({"topics": {"a": {"partitions": 1}}})).unwrap();
        let first_end = bytes.len() as u64;
        write_entry(&mut bytes, &json!({"topics": {"b": null}})).unwrap();
        let whole = bytes.len() as u64;
        let (entries, end) = decode_entries(&bytes, 16, p).unwrap();
        assert_eq!((entries.len(), end), (2, 16 + whole));
        for cut in first_end as usize + 1..bytes.len() {
            let (entries, end) = decode_entries(&bytes[..cut], 16, p).unwrap();
            assert_eq!((entries.len(), end), (1, 16 + first_end), "torn at {cut}");
        }
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() ^= 1;
        let (entries, end) = decode_entries(&bad, 16, p).unwrap();
        assert_eq!((entries.len(), end), (1, 16 + first_end));
        // A length field torn into a huge number is a tail too, not an allocation.
        let mut huge = bytes[..first_end as usize].to_vec();
        huge.extend_from_slice(&[0xff; 8]);
        assert_eq!(decode_entries(&huge, 16, p).unwrap().0.len(), 1);
        // So are zeros (a file longer than what reached the disk): their CRC-32C would match.
        let mut zeros = bytes[..first_end as usize].to_vec();
        zeros.extend_from_slice(&[0; 4096]);
        assert_eq!(
            decode_entries(&zeros, 16, p).unwrap(),
            (vec![json!({"topics": {"a": {"partitions": 1}}})], 16 + first_end)
        );
    }

    #[test]
    fn entries_are_read_across_chunks_and_no_further_than_they_go() {
        let path = std::env::temp_dir().join(format!("kafkalite-journal-chunks-{}", std::process::id()));
        let mut bytes = header(1);
        let patches: Vec<Value> = (0..3000)
            .map(|i| json!({"topics": {format!("t{i}"): {"partitions": 1, "config": {"x": "y".repeat(i % 1500)}}}}))
            .chain([json!({"config": {"big": "z".repeat(3 * CHUNK)}})])
            .collect();
        patches.iter().for_each(|p| write_entry(&mut bytes, p).unwrap());
        let valid = bytes.len() as u64;
        bytes.extend_from_slice(&encode_entry(&patches[0])[..20]); // a torn tail
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(read_entries(&file, HEADER_LEN, &path).unwrap(), (patches.clone(), valid));
        // A length far past the file's bytes (sparse): read as far as the entries go.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(1 << 40).unwrap();
        assert_eq!(read_entries(&file, HEADER_LEN, &path).unwrap().1, valid);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_crc_valid_entry_that_is_no_object_is_damage() {
        let mut bytes = Vec::new();
        write_entry(&mut bytes, &json!([1, 2])).unwrap();
        let err = decode_entries(&bytes, 16, Path::new("j")).unwrap_err();
        assert!(matches!(err, Error::CorruptMetadata(_)) && err.to_string().contains("byte 16"), "{err}");
    }
}
