//! Protobuf-style zig-zag varints, as Kafka's `ByteUtils` writes them inside v2 records.
//! A varint carries an i32 in at most 5 bytes; a varlong an i64 in at most 10.

use crate::storage::error::{Error, Result};

/// Append `v` as a zig-zag varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_unsigned(out, ((v << 1) ^ (v >> 31)) as u32 as u64);
}

/// Append `v` as a zig-zag varlong.
#[inline]
pub fn put_varlong(out: &mut Vec<u8>, v: i64) {
    put_unsigned(out, ((v << 1) ^ (v >> 63)) as u64);
}

#[inline]
fn put_unsigned(out: &mut Vec<u8>, mut u: u64) {
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

/// Number of bytes `put_varint(v)` writes.
#[inline]
pub fn varint_len(v: i32) -> usize {
    unsigned_len(((v << 1) ^ (v >> 31)) as u32 as u64)
}

/// Number of bytes `put_varlong(v)` writes.
#[inline]
pub fn varlong_len(v: i64) -> usize {
    unsigned_len(((v << 1) ^ (v >> 63)) as u64)
}

#[inline]
fn unsigned_len(u: u64) -> usize {
    let bits = 64 - (u | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Read an unsigned base-128 value of at most `max_bytes` bytes from `buf[*pos..]`.
/// Like Java's decoder, a continuation bit on the last allowed byte is an error, and
/// stray high bits in that byte are shifted away.
#[inline(always)]
fn get_unsigned(buf: &[u8], pos: &mut usize, max_bytes: usize) -> Result<u64> {
    // Most varints in a record (attributes, deltas, short lengths) are one byte.
    if let Some(&b) = buf.get(*pos) {
        if b < 0x80 {
            *pos += 1;
            return Ok(b as u64);
        }
    }
    let mut result: u64 = 0;
    for i in 0..max_bytes {
        let Some(&b) = buf.get(*pos) else {
            return Err(Error::corrupt("varint runs past the end of the record data"));
        };
        *pos += 1;
        result |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(result);
        }
    }
    Err(Error::corrupt(format!("varint longer than {max_bytes} bytes")))
}

/// Read a zig-zag varint (i32).
#[inline(always)]
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Result<i32> {
    let u = get_unsigned(buf, pos, 5)? as u32;
    Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
}

/// Read a zig-zag varlong (i64).
#[inline(always)]
pub fn get_varlong(buf: &[u8], pos: &mut usize) -> Result<i64> {
    let u = get_unsigned(buf, pos, 10)?;
    Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
}

/// Append an unsigned varint (no zig-zag); used only by the tests' vectors and control records.
#[inline]
pub fn put_unsigned_varint(out: &mut Vec<u8>, v: u32) {
    put_unsigned(out, v as u64);
}

/// Read an unsigned varint (no zig-zag).
#[inline]
pub fn get_unsigned_varint(buf: &[u8], pos: &mut usize) -> Result<u32> {
    Ok(get_unsigned(buf, pos, 5)? as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_byteutils_vectors() {
        let cases: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (-65, &[0x81, 0x01]),
            (8191, &[0xfe, 0x7f]),
            (8192, &[0x80, 0x80, 0x01]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for &(v, bytes) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "encode {v}");
            assert_eq!(varint_len(v), bytes.len());
            let mut pos = 0;
            assert_eq!(get_varint(bytes, &mut pos).unwrap(), v);
            assert_eq!(pos, bytes.len());
        }
    }

    #[test]
    fn rejects_overlong_and_truncated() {
        let mut pos = 0;
        assert!(get_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut pos).is_err());
        let mut pos = 0;
        assert!(get_varint(&[0x80], &mut pos).is_err());
        let mut pos = 0;
        assert!(get_varlong(&[0xff; 11], &mut pos).is_err());
    }

    proptest::proptest! {
        #[test]
        fn varlong_round_trips(v: i64) {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            proptest::prop_assert_eq!(out.len(), varlong_len(v));
            let mut pos = 0;
            proptest::prop_assert_eq!(get_varlong(&out, &mut pos).unwrap(), v);
        }

        #[test]
        fn varint_round_trips(v: i32) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut pos = 0;
            proptest::prop_assert_eq!(get_varint(&out, &mut pos).unwrap(), v);
        }
    }
}
