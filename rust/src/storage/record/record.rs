//! One record inside a v2 batch (`DefaultRecord`):
//!
//! ```text
//! length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
//! keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value
//! headerCount varint | { keyLength varint | key utf-8 | valueLength varint (-1 = null) | value }*
//! ```

use crate::storage::error::{Error, Result};
use crate::storage::record::varint::{get_varint, get_varlong, put_varint, put_varlong, varint_len, varlong_len};

/// A header: a UTF-8 key and a nullable value.
pub type Header<'a> = (&'a str, Option<&'a [u8]>);

/// A decoded record borrowing from the batch's (decompressed) record area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<Header<'a>>,
    /// LogAppendTime: the timestamp is the broker's (here: the log's) append time.
    pub log_append_time: bool,
}

/// Read a nullable length-prefixed byte string.
#[inline(always)]
fn get_nullable_bytes<'a>(buf: &'a [u8], pos: &mut usize, what: &str) -> Result<Option<&'a [u8]>> {
    let len = get_varint(buf, pos)?;
    if len < 0 {
        if len != -1 {
            return Err(Error::corrupt(format!("record {what} has negative length {len}")));
        }
        return Ok(None);
    }
    let end = pos
        .checked_add(len as usize)
        .filter(|&e| e <= buf.len())
        .ok_or_else(|| Error::corrupt(format!("record {what} of {len} bytes runs past the record")))?;
    let bytes = &buf[*pos..end];
    *pos = end;
    Ok(Some(bytes))
}

/// Decode the record starting at `buf[*pos..]` and advance `pos` past it.
/// `base_offset`/`base_timestamp` come from the batch header; `log_append_time` is the
/// batch's maxTimestamp when the batch uses LogAppendTime (then every record reports it).
// Inlined into the batch loop, so that a sink takes the fields from registers rather than
// from a returned `RecordRef` (measured: a third of read_arrow's decode time).
#[inline(always)]
pub fn decode_record<'a>(
    buf: &'a [u8],
    pos: &mut usize,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
) -> Result<RecordRef<'a>> {
    let body_len = get_varint(buf, pos)?;
    if body_len < 0 {
        return Err(Error::corrupt(format!("record declares negative length {body_len}")));
    }
    let body_end = pos
        .checked_add(body_len as usize)
        .filter(|&e| e <= buf.len())
        .ok_or_else(|| Error::corrupt(format!("record of {body_len} bytes runs past its batch")))?;
    let body = &buf[..body_end];
    *pos += 1; // attributes: an int8, unused by Kafka so far
    if *pos > body_end {
        return Err(Error::corrupt("record ends before its attributes"));
    }
    let timestamp_delta = get_varlong(body, pos)?;
    let offset_delta = get_varint(body, pos)?;
    let key = get_nullable_bytes(body, pos, "key")?;
    let value = get_nullable_bytes(body, pos, "value")?;
    let header_count = get_varint(body, pos)?;
    if header_count < 0 || header_count as usize > body_end - *pos {
        return Err(Error::corrupt(format!("record declares {header_count} headers, more than its bytes can hold")));
    }
    let mut headers = if header_count == 0 { Vec::new() } else { Vec::with_capacity(header_count as usize) };
    for _ in 0..header_count {
        let key_bytes = get_nullable_bytes(body, pos, "header key")?
            .ok_or_else(|| Error::corrupt("record header has a null key"))?;
        let key = std::str::from_utf8(key_bytes).map_err(|_| Error::corrupt("record header key is not valid UTF-8"))?;
        let value = get_nullable_bytes(body, pos, "header value")?;
        headers.push((key, value));
    }
    if *pos != body_end {
        return Err(Error::corrupt(format!(
            "record declares {body_len} bytes but its fields take {}",
            body_len as usize + *pos - body_end
        )));
    }
    Ok(RecordRef {
        offset: base_offset + offset_delta as i64,
        timestamp: log_append_time.unwrap_or(base_timestamp.wrapping_add(timestamp_delta)),
        key,
        value,
        headers,
        log_append_time: log_append_time.is_some(),
    })
}

/// What a writer hands us for one record.
#[derive(Clone, Copy, Debug)]
pub struct RecordInput<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header<'a>],
    pub timestamp: i64,
}

#[inline]
fn nullable_len(b: Option<&[u8]>) -> usize {
    match b {
        None => 1,
        Some(b) => varint_len(b.len() as i32) + b.len(),
    }
}

/// A few varints assembled on the stack, so a record costs a handful of `extend`s rather
/// than a capacity check per byte.
struct Small {
    buf: [u8; 40],
    len: usize,
}

impl Small {
    #[inline(always)]
    fn new() -> Self {
        Small { buf: [0; 40], len: 0 }
    }

    #[inline(always)]
    fn unsigned(&mut self, mut u: u64) {
        while u >= 0x80 {
            self.buf[self.len] = (u as u8) | 0x80;
            self.len += 1;
            u >>= 7;
        }
        self.buf[self.len] = u as u8;
        self.len += 1;
    }

    #[inline(always)]
    fn varint(&mut self, v: i32) {
        self.unsigned(((v << 1) ^ (v >> 31)) as u32 as u64);
    }

    #[inline(always)]
    fn varlong(&mut self, v: i64) {
        self.unsigned(((v << 1) ^ (v >> 63)) as u64);
    }

    #[inline(always)]
    fn flush_into(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf[..self.len]);
        self.len = 0;
    }
}

#[inline]
fn put_nullable(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

/// Append one encoded record (length prefix included) to `out`.
#[inline]
pub fn encode_record(out: &mut Vec<u8>, offset_delta: i32, timestamp_delta: i64, r: &RecordInput<'_>) {
    let mut body = 1 + varlong_len(timestamp_delta) + varint_len(offset_delta);
    body += nullable_len(r.key) + nullable_len(r.value) + varint_len(r.headers.len() as i32);
    for (k, v) in r.headers {
        body += nullable_len(Some(k.as_bytes())) + nullable_len(*v);
    }
    out.reserve(body + 5);
    let mut head = Small::new();
    head.varint(body as i32);
    head.unsigned(0); // attributes
    head.varlong(timestamp_delta);
    head.varint(offset_delta);
    match r.key {
        None => head.varint(-1),
        Some(k) => {
            head.varint(k.len() as i32);
            head.flush_into(out);
            out.extend_from_slice(k);
        }
    }
    match r.value {
        None => head.varint(-1),
        Some(v) => {
            head.varint(v.len() as i32);
            head.flush_into(out);
            out.extend_from_slice(v);
        }
    }
    head.varint(r.headers.len() as i32);
    head.flush_into(out);
    for (k, v) in r.headers {
        put_nullable(out, Some(k.as_bytes()));
        put_nullable(out, *v);
    }
}

/// `encode_record` for a record with a null key and no headers (what `Log.append_values`
/// writes): the same bytes, with the fixed fields written as constants and each byte pushed
/// straight into the reserved buffer (the general encoder's stack staging made the copy out
/// wait for its byte stores, a store-forwarding stall per record). The tests check both
/// encoders give the same bytes.
#[inline(always)]
pub fn encode_value_record(out: &mut Vec<u8>, offset_delta: i32, timestamp_delta: i64, value: &[u8]) {
    let len = value.len() as i32;
    // attributes, timestampDelta, offsetDelta, null key, valueLength, value, header count
    let body = 1 + varlong_len(timestamp_delta) + varint_len(offset_delta) + 1 + varint_len(len) + value.len() + 1;
    out.reserve(5 + body);
    put_varint(out, body as i32);
    out.push(0);
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_varint(out, -1);
    put_varint(out, len);
    out.extend_from_slice(value);
    out.push(0);
}

/// A record a batch can be built from: sized before it is added (to close a batch that
/// would pass its target size) and then encoded into the batch.
pub trait EncodeRecord {
    /// `encode_record`'s size bound for this record.
    fn size_upper_bound(&self) -> usize;
    /// Encode into `out` with these deltas.
    fn encode(&self, out: &mut Vec<u8>, offset_delta: i32, timestamp_delta: i64);
    fn timestamp(&self) -> i64;
}

impl EncodeRecord for RecordInput<'_> {
    #[inline(always)]
    fn size_upper_bound(&self) -> usize {
        record_size_upper_bound(self)
    }
    #[inline(always)]
    fn encode(&self, out: &mut Vec<u8>, offset_delta: i32, timestamp_delta: i64) {
        encode_record(out, offset_delta, timestamp_delta, self)
    }
    #[inline(always)]
    fn timestamp(&self) -> i64 {
        self.timestamp
    }
}

/// A value with a null key and no headers.
#[derive(Clone, Copy, Debug)]
pub struct ValueInput<'a> {
    pub value: &'a [u8],
    pub timestamp: i64,
}

impl EncodeRecord for ValueInput<'_> {
    #[inline(always)]
    fn size_upper_bound(&self) -> usize {
        // length, attributes, timestampDelta, offsetDelta, key, valueLength, value, headers
        5 + 1 + 10 + 5 + 1 + 5 + self.value.len() + 1
    }
    #[inline(always)]
    fn encode(&self, out: &mut Vec<u8>, offset_delta: i32, timestamp_delta: i64) {
        encode_value_record(out, offset_delta, timestamp_delta, self.value)
    }
    #[inline(always)]
    fn timestamp(&self) -> i64 {
        self.timestamp
    }
}

/// Size in bytes of one record as `encode_record` writes it (an upper bound when the
/// timestamp delta is not yet known: we assume the 10-byte worst case).
#[inline]
pub fn record_size_upper_bound(r: &RecordInput<'_>) -> usize {
    let mut body = 1 + 10 + 5 + nullable_len(r.key) + nullable_len(r.value) + 5;
    for (k, v) in r.headers {
        body += nullable_len(Some(k.as_bytes())) + nullable_len(*v);
    }
    body + 5
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values-only encoder is a shortcut of the general one: the same bytes for every
    /// varint width of every field it writes.
    #[test]
    fn value_records_encode_as_general_records() {
        let lengths = [0usize, 1, 63, 64, 127, 128, 8191, 8192, 70_000];
        let offset_deltas = [0i32, 1, 63, 64, 8191, 8192, 1 << 20, i32::MAX];
        let timestamp_deltas = [0i64, 1, -1, 63, 64, -65, 1 << 40, i64::MAX, i64::MIN];
        for &len in &lengths {
            let value = vec![0xa5u8; len];
            for &od in &offset_deltas {
                for &td in &timestamp_deltas {
                    let general = RecordInput { key: None, value: Some(&value), headers: &[], timestamp: 0 };
                    let (mut want, mut got) = (vec![7u8], vec![7u8]);
                    encode_record(&mut want, od, td, &general);
                    encode_value_record(&mut got, od, td, &value);
                    assert_eq!(got, want, "value of {len} bytes, offset delta {od}, timestamp delta {td}");
                    let input = ValueInput { value: &value, timestamp: 0 };
                    assert!(input.size_upper_bound() >= want.len() - 1);
                    assert!(input.size_upper_bound() <= record_size_upper_bound(&general));
                }
            }
        }
    }
}
