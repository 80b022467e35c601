//! The records of `__transaction_state` in Kafka's own format, so a broker's transaction log
//! reads here and ours in a broker: key TransactionLogKey (an int16 version 0, then the
//! transactional id as an int16-length string), value TransactionLogValue v0 (int16 version,
//! producerId, producerEpoch, transactionTimeoutMs, transactionStatus (int8), the partitions
//! (nullable array of topic + int32 array), lastUpdateTimestampMs, startTimestampMs) or v1,
//! the flexible version Kafka 4.x writes for transaction version 2 (compact arrays and strings,
//! tagged fields: 0 PreviousProducerId, 1 NextProducerId, 2 ClientTransactionVersion). A null
//! value is a tombstone: the id expired. kafkalite writes v0 unless a v1-only field is set.

use std::collections::BTreeSet;

use crate::coordination::offsets_codec::{put_string, Reader};
use crate::storage::error::{Error, Result};

use super::metadata::{TransactionMetadata, TransactionState};

pub use crate::storage::datadir::TRANSACTION_STATE_TOPIC;
/// Kafka's transaction.state.log.num.partitions.
pub const TRANSACTION_STATE_PARTITIONS: i32 = 50;
/// The newest TransactionLogValue version Kafka writes.
pub const MAX_VALUE_VERSION: i16 = 1;

/// Kafka's `TransactionStateManager.partitionFor`: `Utils.abs(transactionalId.hashCode) % 50`.
pub fn state_partition(transactional_id: &str) -> i32 {
    let h = crate::coordination::offsets_codec::java_string_hash(transactional_id);
    if h == i32::MIN {
        0
    } else {
        h.abs() % TRANSACTION_STATE_PARTITIONS
    }
}

/// TransactionLogKey v0.
pub fn encode_key(transactional_id: &str) -> Result<Vec<u8>> {
    let mut out = 0i16.to_be_bytes().to_vec();
    put_string(&mut out, transactional_id)?;
    Ok(out)
}

/// The transactional id of a TransactionLogKey.
pub fn decode_key(key: &[u8]) -> Result<String> {
    let mut r = Reader { buf: key, pos: 0 };
    let decoded = (|| {
        let version = r.i16()?;
        if version != 0 {
            return Err(format!("key version {version}; only version 0 exists"));
        }
        r.string()
    })();
    decoded.map_err(|e| Error::corrupt(format!("{TRANSACTION_STATE_TOPIC} holds a key that does not decode: {e}")))
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Topic -> partition ids, in order (TransactionPartitions groups partitions by topic).
fn by_topic(partitions: &BTreeSet<(String, i32)>) -> Vec<(&str, Vec<i32>)> {
    let mut grouped: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, p) in partitions {
        match grouped.last_mut() {
            Some((t, ids)) if *t == topic.as_str() => ids.push(*p),
            _ => grouped.push((topic.as_str(), vec![*p])),
        }
    }
    grouped
}

/// TransactionLogValue: v0, or v1 when a field only v1 holds is set. Kafka writes the
/// partitions as null in state Empty.
pub fn encode_value(m: &TransactionMetadata) -> Result<Vec<u8>> {
    let v1 = m.previous_producer_id != -1 || m.next_producer_id != -1 || m.client_transaction_version != 0;
    encode_value_version(m, if v1 { 1 } else { 0 })
}

/// TransactionLogValue at `version` (0 or 1).
pub fn encode_value_version(m: &TransactionMetadata, version: i16) -> Result<Vec<u8>> {
    let mut out = version.to_be_bytes().to_vec();
    out.extend_from_slice(&m.producer_id.to_be_bytes());
    out.extend_from_slice(&m.producer_epoch.to_be_bytes());
    out.extend_from_slice(&m.timeout_ms.to_be_bytes());
    out.push(m.state.id() as u8);
    let grouped = (m.state != TransactionState::Empty).then(|| by_topic(&m.partitions));
    if version == 0 {
        match &grouped {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(g) => {
                out.extend_from_slice(&(g.len() as i32).to_be_bytes());
                for (topic, ids) in g {
                    put_string(&mut out, topic)?;
                    out.extend_from_slice(&(ids.len() as i32).to_be_bytes());
                    ids.iter().for_each(|p| out.extend_from_slice(&p.to_be_bytes()));
                }
            }
        }
    } else {
        match &grouped {
            None => put_uvarint(&mut out, 0),
            Some(g) => {
                put_uvarint(&mut out, g.len() as u64 + 1);
                for (topic, ids) in g {
                    put_uvarint(&mut out, topic.len() as u64 + 1);
                    out.extend_from_slice(topic.as_bytes());
                    put_uvarint(&mut out, ids.len() as u64 + 1);
                    ids.iter().for_each(|p| out.extend_from_slice(&p.to_be_bytes()));
                    put_uvarint(&mut out, 0); // the entry's tagged fields
                }
            }
        }
    }
    out.extend_from_slice(&m.last_update_ms.to_be_bytes());
    out.extend_from_slice(&m.start_ms.to_be_bytes());
    if version >= 1 {
        let mut tagged: Vec<(u64, Vec<u8>)> = Vec::new();
        if m.previous_producer_id != -1 {
            tagged.push((0, m.previous_producer_id.to_be_bytes().to_vec()));
        }
        if m.next_producer_id != -1 {
            tagged.push((1, m.next_producer_id.to_be_bytes().to_vec()));
        }
        if m.client_transaction_version != 0 {
            tagged.push((2, m.client_transaction_version.to_be_bytes().to_vec()));
        }
        put_uvarint(&mut out, tagged.len() as u64);
        for (tag, bytes) in tagged {
            put_uvarint(&mut out, tag);
            put_uvarint(&mut out, bytes.len() as u64);
            out.extend_from_slice(&bytes);
        }
    }
    Ok(out)
}

/// Skip a struct's tagged fields, handing each (tag, bytes) to `f`.
fn tagged_fields(
    r: &mut Reader<'_>,
    mut f: impl FnMut(u64, &[u8]) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let count = r.uvarint()?;
    for _ in 0..count {
        let tag = r.uvarint()?;
        let size = r.uvarint()? as usize;
        let bytes = r.take(size, "a tagged field")?;
        f(tag, bytes)?;
    }
    Ok(())
}

/// A count read from the record, bounded by the bytes left (each element takes at least
/// `min_size`), so a hostile count cannot make us allocate.
fn bounded(r: &Reader<'_>, n: u64, min_size: usize) -> std::result::Result<usize, String> {
    let left = (r.buf.len() - r.pos) / min_size.max(1);
    usize::try_from(n).ok().filter(|&n| n <= left).ok_or_else(|| format!("an array of {n} elements at {}", r.pos))
}

/// TransactionLogValue v0 or v1 of `transactional_id`. A newer version is
/// `Error::Unsupported`; damage is `Error::Corrupt`.
pub fn decode_value(transactional_id: &str, value: &[u8]) -> Result<TransactionMetadata> {
    let mut r = Reader { buf: value, pos: 0 };
    let corrupt = |e: String| {
        Error::corrupt(format!(
            "{TRANSACTION_STATE_TOPIC} holds a TransactionLogValue for {transactional_id:?} that does not decode: {e}"
        ))
    };
    let version = r.i16().map_err(corrupt)?;
    if !(0..=MAX_VALUE_VERSION).contains(&version) {
        return Err(Error::Unsupported(format!(
            "{TRANSACTION_STATE_TOPIC} holds a TransactionLogValue of version {version}; kafkalite reads versions \
             0-{MAX_VALUE_VERSION} (a newer Kafka wrote it: upgrade kafkalite)"
        )));
    }
    let mut m = TransactionMetadata::new(transactional_id, -1, 0, -1);
    let decoded = (|| {
        m.producer_id = r.i64()?;
        m.producer_epoch = r.i16()?;
        m.timeout_ms = r.i32()?;
        let status = r.take(1, "an int8")?[0] as i8;
        m.state = TransactionState::from_id(status).ok_or_else(|| format!("unknown transaction state {status}"))?;
        let topics = if version == 0 {
            match r.i32()? {
                -1 => None,
                n if n < 0 => return Err(format!("array length {n}")),
                n => Some(bounded(&r, n as u64, 6)?),
            }
        } else {
            match r.uvarint()? {
                0 => None,
                n => Some(bounded(&r, n - 1, 3)?),
            }
        };
        for _ in 0..topics.unwrap_or(0) {
            let topic = if version == 0 { r.string()? } else { r.compact_string()? };
            let ids = if version == 0 {
                let n = r.i32()?;
                bounded(&r, u64::try_from(n).map_err(|_| format!("array length {n}"))?, 4)?
            } else {
                let n = r.uvarint()?.checked_sub(1).ok_or("a null partition array")?;
                bounded(&r, n, 4)?
            };
            for _ in 0..ids {
                m.partitions.insert((topic.clone(), r.i32()?));
            }
            if version >= 1 {
                tagged_fields(&mut r, |_, _| Ok(()))?;
            }
        }
        m.last_update_ms = r.i64()?;
        m.start_ms = r.i64()?;
        if version >= 1 {
            tagged_fields(&mut r, |tag, bytes| {
                let wrong = || format!("tagged field {tag} of {} bytes", bytes.len());
                match tag {
                    0 => m.previous_producer_id = i64::from_be_bytes(bytes.try_into().map_err(|_| wrong())?),
                    1 => m.next_producer_id = i64::from_be_bytes(bytes.try_into().map_err(|_| wrong())?),
                    2 => m.client_transaction_version = i16::from_be_bytes(bytes.try_into().map_err(|_| wrong())?),
                    _ => {} // unknown tagged fields are skipped, as Kafka does
                }
                Ok(())
            })?;
        }
        Ok::<_, String>(())
    })();
    decoded.map_err(corrupt)?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(state: TransactionState) -> TransactionMetadata {
        let mut m = TransactionMetadata::new("app-1", 4242, 60_000, 1_700_000_000_000);
        m.producer_epoch = 7;
        m.state = state;
        m.start_ms = 1_699_999_999_000;
        m.partitions = [("a".to_string(), 0), ("a".to_string(), 3), ("b".to_string(), 1)].into_iter().collect();
        m
    }

    #[test]
    fn partition_of_an_id_is_kafkas() {
        assert_eq!(state_partition("a"), 97 % 50);
        assert_eq!(state_partition(""), 0);
    }

    #[test]
    fn key_bytes_are_kafkas_and_round_trip() {
        let key = encode_key("tx").unwrap();
        assert_eq!(key, [0, 0, 0, 2, b't', b'x']);
        assert_eq!(decode_key(&key).unwrap(), "tx");
        assert!(matches!(decode_key(&[0, 1, 0, 0]), Err(Error::Corrupt(_))));
        assert!(matches!(decode_key(&[0, 0, 0, 9, b'x']), Err(Error::Corrupt(_))));
    }

    #[test]
    fn v0_bytes_are_kafkas_and_round_trip() {
        let m = sample(TransactionState::Ongoing);
        let bytes = encode_value(&m).unwrap();
        // version, pid, epoch, timeout, status, 2 topics: "a" [0, 3], "b" [1], then two timestamps.
        let mut want = vec![0, 0];
        want.extend_from_slice(&4242i64.to_be_bytes());
        want.extend_from_slice(&7i16.to_be_bytes());
        want.extend_from_slice(&60_000i32.to_be_bytes());
        want.push(1);
        want.extend_from_slice(&2i32.to_be_bytes());
        want.extend_from_slice(&[0, 1, b'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3]);
        want.extend_from_slice(&[0, 1, b'b', 0, 0, 0, 1, 0, 0, 0, 1]);
        want.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        want.extend_from_slice(&1_699_999_999_000i64.to_be_bytes());
        assert_eq!(bytes, want);
        assert_eq!(decode_value("app-1", &bytes).unwrap(), m);
        // Empty: the partitions are null, as Kafka writes them.
        let mut empty = sample(TransactionState::Empty);
        empty.partitions.clear();
        let bytes = encode_value(&empty).unwrap();
        assert_eq!(&bytes[17..21], &(-1i32).to_be_bytes());
        assert_eq!(decode_value("app-1", &bytes).unwrap(), empty);
    }

    #[test]
    fn v1_decodes_with_tagged_fields_and_round_trips() {
        let mut m = sample(TransactionState::PrepareCommit);
        m.previous_producer_id = 11;
        m.next_producer_id = 12;
        m.client_transaction_version = 2;
        let bytes = encode_value(&m).unwrap();
        assert_eq!(&bytes[..2], &[0, 1], "a v1-only field makes it v1");
        assert_eq!(decode_value("app-1", &bytes).unwrap(), m);
        // A hand-written v1 value, as Kafka 4.x's generated code writes it: one topic "t"
        // with partition 5, no tagged fields but an unknown tag 9 at the end.
        let mut v1 = vec![0, 1];
        v1.extend_from_slice(&1i64.to_be_bytes());
        v1.extend_from_slice(&0i16.to_be_bytes());
        v1.extend_from_slice(&1000i32.to_be_bytes());
        v1.push(4); // CompleteCommit
        v1.extend_from_slice(&[2, 2, b't', 2, 0, 0, 0, 5, 0]);
        v1.extend_from_slice(&5i64.to_be_bytes());
        v1.extend_from_slice(&6i64.to_be_bytes());
        v1.extend_from_slice(&[2, 2, 2, 0, 2, 9, 1, 0xff]);
        let d = decode_value("t", &v1).unwrap();
        assert_eq!(d.state, TransactionState::CompleteCommit);
        assert_eq!(d.partitions.into_iter().collect::<Vec<_>>(), vec![("t".to_string(), 5)]);
        assert_eq!((d.last_update_ms, d.start_ms, d.client_transaction_version), (5, 6, 2));
        // v1 written for a v0-shaped value also decodes.
        let plain = sample(TransactionState::Ongoing);
        assert_eq!(decode_value("app-1", &encode_value_version(&plain, 1).unwrap()).unwrap(), plain);
    }

    #[test]
    fn damage_and_newer_versions_are_typed_never_a_panic() {
        let bytes = encode_value(&sample(TransactionState::Ongoing)).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode_value("x", &bytes[..cut]).is_err(), "a value cut at {cut} decoded");
        }
        let mut newer = bytes.clone();
        newer[1] = 2;
        assert!(matches!(decode_value("x", &newer), Err(Error::Unsupported(_))));
        let mut bad_state = bytes.clone();
        bad_state[16] = 42;
        assert!(matches!(decode_value("x", &bad_state), Err(Error::Corrupt(_))));
        let mut huge = bytes;
        huge[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(decode_value("x", &huge), Err(Error::Corrupt(_))));
    }
}
