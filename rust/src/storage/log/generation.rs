//! The partition's segment generation: how a follower knows, without listing the directory,
//! that the set of segment files changed other than by a roll.
//!
//! Listing a directory of 30,000 segments costs milliseconds, and shared writers follow each
//! other before every append. Most changes need no listing: the segment after a sealed one is
//! named by the sealed one's next offset (a roll creates `<log end>.log`), so a follower finds
//! rolls by name (`follow::follow_rolls`). What names cannot tell is a segment deleted
//! (retention, DeleteRecords), replaced (the cleaner's swap) or cut (recovery at open): whoever
//! does that bumps the counter in `.kafkalite-segments` before it starts and again when it is
//! done, and a follower lists the directory only when the counter is not the one it last saw.
//!
//! Kill -9 at any step is safe: the bump before the change means a change that died halfway
//! still moved the counter (shared writers follow under the append lock, so they never see the
//! middle of a change; a lock-free reader that listed in the middle sees the second bump). A
//! file that is missing, short or fails its check reads as "unknown", which makes followers
//! list as they did before the file existed; writers then rewrite it with a fresh nonce.
//!
//! Layout, 32 bytes little-endian: magic `KLSEGGEN`, nonce, counter, check (a hash of the three).
//! The nonce is drawn at random whenever the file is (re)created, so a file deleted and made
//! again never repeats a (nonce, counter) pair a follower remembers. Written in place with one
//! `pwrite`; a lock-free reader that catches it half-written fails the check and lists.

use std::hash::{BuildHasher, Hasher};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::storage::error::{IoContext, Result};
use crate::storage::files::SEGMENTS_GENERATION_FILE;

const MAGIC: &[u8; 8] = b"KLSEGGEN";
const LEN: usize = 32;

/// One value of the counter: equal values mean no segment was deleted or replaced between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Generation {
    nonce: u64,
    counter: u64,
}

fn check(nonce: u64, counter: u64) -> u64 {
    // splitmix64's finalizer over both words: a torn mix of two writes fails it.
    let mut z = nonce ^ counter.rotate_left(29) ^ u64::from_le_bytes(*MAGIC);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A nonce nobody drew before: std's per-process random hash keys over the clock.
fn fresh_nonce() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.finish()
}

impl Generation {
    fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..16].copy_from_slice(&self.nonce.to_le_bytes());
        out[16..24].copy_from_slice(&self.counter.to_le_bytes());
        out[24..].copy_from_slice(&check(self.nonce, self.counter).to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Generation> {
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        if bytes.len() != LEN || &bytes[..8] != MAGIC {
            return None;
        }
        let (nonce, counter) = (word(8), word(16));
        (word(24) == check(nonce, counter)).then_some(Generation { nonce, counter })
    }
}

/// The generation `dir` holds now; None when its file is missing, unreadable or damaged (then
/// the caller lists the directory). One open, one `pread`, one close: no stat of any segment.
pub(crate) fn read(dir: &Path) -> Option<Generation> {
    let file = crate::storage::nofollow::open_read(&dir.join(SEGMENTS_GENERATION_FILE), "segment generation").ok()?;
    let mut buf = [0u8; LEN + 1];
    let mut n = 0;
    // A longer file is damaged: read one byte more to tell.
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Generation::decode(&buf[..n])
}

/// Move the generation on (a writer, under the append lock when writers are shared): the
/// counter plus one, or a fresh nonce when the file was missing or damaged. Returns the new value.
pub(crate) fn bump(dir: &Path) -> Result<Generation> {
    let path = dir.join(SEGMENTS_GENERATION_FILE);
    let cannot = || format!("cannot update {}", path.display());
    crate::storage::failpoint::hit("segments.generation").context(cannot)?;
    let next = match read(dir) {
        Some(g) => Generation { nonce: g.nonce, counter: g.counter.wrapping_add(1) },
        None => Generation { nonce: fresh_nonce(), counter: 0 },
    };
    let file = crate::storage::nofollow::open(
        crate::storage::nofollow::options().read(true).write(true).create(true),
        &path,
        "segment generation",
    )?;
    file.write_all_at(&next.encode(), 0).context(cannot)?;
    // A damaged file may have been longer.
    if file.metadata().context(cannot)?.len() != LEN as u64 {
        file.set_len(LEN as u64).context(cannot)?;
    }
    Ok(next)
}

impl super::Log {
    /// Before deleting or replacing segment files (as the partition's writer): move the
    /// generation first, so that every follower lists the directory again even if this process
    /// dies halfway. Our own view counts as stale until `segments_changed`. Fails (and the
    /// caller changes nothing) if the generation cannot be written.
    pub(crate) fn segments_changing(&mut self) -> Result<()> {
        self.generation_seen = None;
        bump(&self.dir).map(|_| ())
    }

    /// After the change, with `segments` matching the directory again: move the generation
    /// once more (a lock-free reader may have listed in the middle of the change) and take the
    /// new value as seen, so this writer's next append does not list.
    pub(crate) fn segments_changed(&mut self) {
        match bump(&self.dir) {
            Ok(generation) => self.generation_seen = Some(generation),
            Err(e) => ::log::warn!(
                target: crate::LOG_TARGET,
                "{e}: readers of {} that listed its segments during the change just made may miss it until the next one",
                self.dir.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bumps_survive_a_round_trip_and_damage_reads_as_unknown() {
        let dir = std::env::temp_dir().join(format!("kafkalite-generation-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(SEGMENTS_GENERATION_FILE);
        let _ = std::fs::remove_file(&path);
        assert_eq!(read(&dir), None, "missing");
        let first = bump(&dir).unwrap();
        assert_eq!(read(&dir), Some(first));
        let second = bump(&dir).unwrap();
        assert_ne!(first, second);
        assert_eq!(read(&dir), Some(second));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&dir), None, "a flipped bit fails the check");
        let third = bump(&dir).unwrap();
        assert_ne!(third.nonce, second.nonce, "a damaged file starts again with a fresh nonce");
        std::fs::write(&path, [&third.encode()[..], b"x"].concat()).unwrap();
        assert_eq!(read(&dir), None, "too long");
        std::fs::write(&path, &third.encode()[..31]).unwrap();
        assert_eq!(read(&dir), None, "too short");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
