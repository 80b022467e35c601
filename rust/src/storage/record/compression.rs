//! The compression codecs of a v2 batch's record area (attribute bits 0-2).
//!
//! Every codec Kafka has is written the way Kafka's Java producer writes it: gzip (a standard
//! gzip stream, `GZIPOutputStream`), snappy (xerial's framing, snappy-java's `SnappyOutputStream`),
//! lz4 (an LZ4 frame as `Lz4BlockOutputStream`: 64 KiB independent blocks, no checksums but the
//! header's) and zstd (one frame). We read what a broker or another client may have written:
//! gzip (any RFC 1952 stream), snappy (xerial's framing and plain raw blocks), lz4 (any LZ4
//! frame) and zstd (one or more frames). Decompression is bounded so that hostile bytes cannot
//! make us allocate without limit.
//!
//! The codec names and ids live here only (`CODEC_NAMES`, the enum's discriminants); Python
//! gets them as `_native.COMPRESSION_TYPES`.

use std::io::Read;

use crate::storage::error::{Error, Result};

/// Output limit for one batch's decompressed records. Kafka's default `max.message.bytes`
/// is 1 MiB; compressed batches of real data stay far below this.
pub const MAX_DECOMPRESSED_BYTES: usize = 256 << 20;

/// The codec named in a batch's attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

/// Kafka's codec names (a producer's `compression.type`), indexed by codec id.
pub const CODEC_NAMES: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

/// A topic's `compression.type` choices: `producer` (keep the writer's codec), Kafka's
/// `uncompressed`, and every codec name (`none` too, as a producer spells it).
pub const TOPIC_CODEC_CHOICES: &[&str] = &["producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"];

impl Compression {
    /// Decode attribute bits 0-2.
    pub fn from_attributes(attributes: i16) -> Result<Self> {
        match attributes & 0x07 {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(Error::corrupt(format!("unknown compression codec id {other} in batch attributes"))),
        }
    }

    /// Kafka's name for the codec (`compression.type`).
    pub fn name(self) -> &'static str {
        CODEC_NAMES[self as usize]
    }

    /// Parse a codec name for writing: Kafka's names (`CODEC_NAMES`), and a topic's
    /// `uncompressed` for `none`. Anything else is a config error that lists the valid names.
    pub fn parse(name: &str) -> Result<Self> {
        let id = match name {
            "uncompressed" => 0,
            _ => CODEC_NAMES.iter().position(|n| *n == name).ok_or_else(|| {
                Error::config(format!("unknown compression type {name:?}; valid: {}", CODEC_NAMES.join(", ")))
            })?,
        };
        Self::from_attributes(id as i16)
    }
}

/// Compress a record area as Kafka's Java producer would (see the module doc); the cleaner
/// rewrites batches in their original codec with this too.
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let failed = |e: std::io::Error| Error::io(format!("{} compression failed", codec.name()), e);
    match codec {
        Compression::None => Ok(data.to_vec()),
        // Level 3 is zstd-jni's default, which is what a Java producer writes.
        Compression::Zstd => zstd::bulk::compress(data, 3).map_err(|e| Error::io("zstd compression failed", e)),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(data).map_err(failed)?;
            enc.finish().map_err(failed)
        }
        Compression::Lz4 => {
            // Kafka's Lz4BlockOutputStream: 64 KiB blocks, each independent (its reader
            // decompresses blocks one by one), no block or content checksum.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            enc.write_all(data).map_err(failed)?;
            enc.finish().map_err(|e| failed(std::io::Error::other(e)))
        }
        Compression::Snappy => {
            let mut out = Vec::with_capacity(data.len() / 2 + XERIAL_HEADER_LEN);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut encoder = snap::raw::Encoder::new();
            for chunk in data.chunks(XERIAL_BLOCK) {
                let block = encoder.compress_vec(chunk).map_err(|e| failed(std::io::Error::other(e)))?;
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
    }
}

/// Decompress a record area into at most `MAX_DECOMPRESSED_BYTES`.
pub fn decompress(codec: Compression, data: &[u8]) -> Result<Vec<u8>> {
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(data), "gzip"),
        Compression::Snappy => decompress_snappy(data),
        Compression::Lz4 => read_bounded(lz4_flex::frame::FrameDecoder::new(data), "lz4"),
        Compression::Zstd => read_bounded(
            zstd::stream::read::Decoder::new(data).map_err(|e| Error::corrupt(format!("zstd: {e}")))?,
            "zstd",
        ),
    }
}

/// Read a decoder to its end, failing rather than growing past the limit.
fn read_bounded(reader: impl Read, codec: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let limit = MAX_DECOMPRESSED_BYTES as u64 + 1;
    reader
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| Error::corrupt(format!("{codec} record data does not decompress: {e}")))?;
    if out.len() > MAX_DECOMPRESSED_BYTES {
        return Err(Error::corrupt(format!("{codec} record data decompresses past {MAX_DECOMPRESSED_BYTES} bytes")));
    }
    Ok(out)
}

/// xerial snappy-java's stream header: magic, then two big-endian ints (version, compat)
/// that some writers put little-endian, so they are not checked.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;
/// snappy-java's default block size.
const XERIAL_BLOCK: usize = 32 * 1024;

fn decompress_snappy(data: &[u8]) -> Result<Vec<u8>> {
    if data.len() >= XERIAL_HEADER_LEN && &data[..8] == XERIAL_MAGIC {
        let mut out = Vec::new();
        let mut pos = XERIAL_HEADER_LEN;
        while pos < data.len() {
            let len_bytes =
                data.get(pos..pos + 4).ok_or_else(|| Error::corrupt("snappy: truncated xerial chunk length"))?;
            let len = u32::from_be_bytes(len_bytes.try_into().unwrap()) as usize;
            pos += 4;
            let block = data
                .get(pos..pos.saturating_add(len))
                .ok_or_else(|| Error::corrupt("snappy: xerial chunk runs past the batch"))?;
            snappy_raw_into(block, &mut out)?;
            pos += len;
        }
        Ok(out)
    } else {
        let mut out = Vec::new();
        snappy_raw_into(data, &mut out)?;
        Ok(out)
    }
}

fn snappy_raw_into(block: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let len = snap::raw::decompress_len(block).map_err(|e| Error::corrupt(format!("snappy: {e}")))?;
    if out.len() + len > MAX_DECOMPRESSED_BYTES {
        return Err(Error::corrupt(format!("snappy record data decompresses past {MAX_DECOMPRESSED_BYTES} bytes")));
    }
    let start = out.len();
    out.resize(start + len, 0);
    snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| Error::corrupt(format!("snappy: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zstd_round_trip() {
        let data = b"hello hello hello hello".repeat(100);
        let c = compress(Compression::Zstd, &data).unwrap();
        assert!(c.len() < data.len());
        assert_eq!(decompress(Compression::Zstd, &c).unwrap(), data);
    }

    #[test]
    fn xerial_and_raw_snappy() {
        let data = b"abcabcabcabcabc".repeat(50);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(decompress(Compression::Snappy, &raw).unwrap(), data);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for chunk in data.chunks(300) {
            let block = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        assert_eq!(decompress(Compression::Snappy, &framed).unwrap(), data);
    }

    #[test]
    fn every_codec_round_trips() {
        let data: Vec<u8> = (0..100_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for codec in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let packed = compress(codec, &data).unwrap();
            assert_eq!(decompress(codec, &packed).unwrap(), data, "{}", codec.name());
        }
    }

    #[test]
    fn names_and_ids_agree() {
        for (id, name) in CODEC_NAMES.iter().enumerate() {
            let codec = Compression::parse(name).unwrap();
            assert_eq!((codec as usize, codec.name()), (id, *name));
            assert!(TOPIC_CODEC_CHOICES.contains(name));
        }
        assert_eq!(Compression::parse("uncompressed").unwrap(), Compression::None);
        let err = Compression::parse("brotli").unwrap_err().to_string();
        assert!(err.contains("none, gzip, snappy, lz4, zstd"), "{err}");
    }

    #[test]
    fn lz4_frame_is_kafkas() {
        let packed = compress(Compression::Lz4, &[7u8; 200_000]).unwrap();
        assert_eq!(&packed[..4], &0x184D2204u32.to_le_bytes());
        // FLG: version 01, block independence, no checksums or size; BD: 64 KiB blocks.
        assert_eq!((packed[4], packed[5]), (0x60, 0x40));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            assert!(decompress(codec, &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]).is_err(), "{codec:?}");
        }
    }

    #[test]
    fn decompression_bombs_are_bounded() {
        let data = vec![0u8; MAX_DECOMPRESSED_BYTES + 10];
        let c = compress(Compression::Zstd, &data).unwrap();
        assert!(decompress(Compression::Zstd, &c).is_err());
    }
}
