//! Every vector in tests/support/vectors/kafka_vectors.json (copied from the shared spec folder; each
//! entry names the public test suite it came from): varints, CRC-32C, murmur2, and record
//! batches of every codec written by real brokers and other clients.

use kafkalite::producer::partitioner::{murmur2, partition_for_key};
use kafkalite::storage::record::header::{compute_crc, crc32c, BatchHeader};
use kafkalite::storage::record::scan::{next_batch, Next};
use kafkalite::storage::record::varint::*;
use kafkalite::storage::record::{decode_batch_owned, BatchBuilder, Compression, RecordInput};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/vectors/kafka_vectors.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn unhex(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}

#[test]
fn varints() {
    let v = vectors();
    for case in v["varint"]["varint"].as_array().unwrap() {
        let bytes = unhex(&case["hex"]);
        let value = case["value"].as_i64().unwrap() as i32;
        let mut out = Vec::new();
        put_varint(&mut out, value);
        assert_eq!(out, bytes, "varint {value}");
        let mut pos = 0;
        assert_eq!(get_varint(&bytes, &mut pos).unwrap(), value);
    }
    for key in ["varlong", "varlong_kafka_python"] {
        for case in v["varint"][key].as_array().unwrap() {
            let bytes = unhex(&case["hex"]);
            let value = case["value"].as_i64().unwrap();
            let mut out = Vec::new();
            put_varlong(&mut out, value);
            assert_eq!(out, bytes, "varlong {value}");
            let mut pos = 0;
            assert_eq!(get_varlong(&bytes, &mut pos).unwrap(), value);
        }
    }
    for case in v["varint"]["unsigned_varint"].as_array().unwrap() {
        let bytes = unhex(&case["hex"]);
        let value = case["value_unsigned"].as_u64().unwrap() as u32;
        let mut out = Vec::new();
        put_unsigned_varint(&mut out, value);
        assert_eq!(out, bytes);
        let mut pos = 0;
        assert_eq!(get_unsigned_varint(&bytes, &mut pos).unwrap(), value);
    }
    for case in v["varint"]["invalid"].as_array().unwrap() {
        let bytes = unhex(&case["hex"]);
        let mut pos = 0;
        let r = if case["type"] == "varint" {
            get_varint(&bytes, &mut pos).map(|_| ())
        } else {
            get_varlong(&bytes, &mut pos).map(|_| ())
        };
        assert!(r.is_err(), "{case}");
    }
}

#[test]
fn crc32c_values() {
    for case in vectors()["crc32c"].as_array().unwrap() {
        // One vector names its input (a licence text) without carrying it.
        if case["input_hex"].is_null() {
            continue;
        }
        let input = unhex(&case["input_hex"]);
        assert_eq!(crc32c(&input) as u64, case["value"].as_u64().unwrap(), "{}", case["input_hex"]);
    }
}

#[test]
fn murmur2_values() {
    let v = vectors();
    for case in
        v["murmur2"]["kafka_java"].as_array().unwrap().iter().chain(v["murmur2"]["librdkafka"].as_array().unwrap())
    {
        if case["input_hex"].is_null() {
            continue;
        }
        let input = unhex(&case["input_hex"]);
        assert_eq!(murmur2(&input) as u32 as u64, case["value_uint32"].as_u64().unwrap(), "{case}");
    }
    for case in v["murmur2"]["kafka_python_partition"].as_array().unwrap() {
        let input = unhex(&case["input_hex"]);
        let n = case["num_partitions"].as_u64().unwrap() as u32;
        assert_eq!(partition_for_key(&input, n) as u64, case["partition"].as_u64().unwrap());
    }
}

/// Decode every batch and compare with the fields the vector file lists.
#[test]
fn record_batches_decode_as_expected() {
    let v = vectors();
    for case in v["record_batches"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let bytes = unhex(&case["hex"]);
        let exp = &case["expected"];
        let crc_valid = case["crc_valid"].as_bool().unwrap();
        // The scanner checks the CRC: a vector with a bad stored CRC must be refused.
        match next_batch(&bytes, 0, true) {
            Ok(Next::Batch(_)) => assert!(crc_valid, "{name}: bad CRC accepted"),
            Err(_) => assert!(!crc_valid, "{name}: good batch refused"),
            Ok(other) => panic!("{name}: {other:?}"),
        }
        let Next::Batch(h) = next_batch(&bytes, 0, false).unwrap() else { panic!("{name}") };
        assert_eq!(h.base_offset, exp["base_offset"].as_i64().unwrap(), "{name}");
        assert_eq!(h.batch_length as i64, exp["batch_length"].as_i64().unwrap());
        assert_eq!(h.partition_leader_epoch as i64, exp["partition_leader_epoch"].as_i64().unwrap());
        assert_eq!(h.crc as u64, exp["crc"].as_u64().unwrap());
        assert_eq!(h.attributes as i64, exp["attributes"].as_i64().unwrap());
        assert_eq!(h.compression().unwrap().name(), exp["compression"].as_str().unwrap());
        assert_eq!(h.is_control(), exp["is_control"].as_bool().unwrap());
        assert_eq!(h.is_transactional(), exp["is_transactional"].as_bool().unwrap());
        assert_eq!(h.last_offset_delta as i64, exp["last_offset_delta"].as_i64().unwrap());
        assert_eq!(h.base_timestamp, exp["base_timestamp"].as_i64().unwrap());
        assert_eq!(h.max_timestamp, exp["max_timestamp"].as_i64().unwrap());
        assert_eq!(h.producer_id, exp["producer_id"].as_i64().unwrap());
        assert_eq!(h.records_count as i64, exp["records_count"].as_i64().unwrap());
        let records = decode_batch_owned(&bytes, &h).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = exp["records"].as_array().unwrap();
        assert_eq!(records.len(), want.len(), "{name}");
        for (r, w) in records.iter().zip(want) {
            assert_eq!(r.offset, h.base_offset + w["offset_delta"].as_i64().unwrap(), "{name}");
            assert_eq!(r.timestamp, w["timestamp"].as_i64().unwrap(), "{name}");
            let hx = |b: &Option<Vec<u8>>| b.as_ref().map(hex::encode);
            assert_eq!(hx(&r.key), w["key_hex"].as_str().map(String::from), "{name}");
            assert_eq!(hx(&r.value), w["value_hex"].as_str().map(String::from), "{name}");
            let want_headers: Vec<(String, Option<String>)> = w["headers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_str().map(String::from)))
                .collect();
            let got: Vec<(String, Option<String>)> =
                r.headers.iter().map(|(k, v)| (k.clone(), v.as_ref().map(hex::encode))).collect();
            assert_eq!(got, want_headers, "{name}");
        }
    }
}

/// Re-encode each uncompressed, non-control, CreateTime vector with our builder, using its
/// header fields, and require the same bytes.
#[test]
fn uncompressed_batches_reencode_byte_for_byte() {
    let v = vectors();
    let mut checked = 0;
    for case in v["record_batches"].as_array().unwrap() {
        let bytes = unhex(&case["hex"]);
        let Ok(Next::Batch(h)) = next_batch(&bytes, 0, true) else {
            continue;
        };
        if h.compression().unwrap() != Compression::None || h.is_control() || h.records_count == 0 {
            continue;
        }
        let records = decode_batch_owned(&bytes, &h).unwrap();
        // Our builder writes dense offset deltas and, like Kafka's, takes baseTimestamp from
        // the first record; skip vectors written otherwise (compacted gaps, sarama's base time).
        if records.iter().enumerate().any(|(i, r)| r.offset != h.base_offset + i as i64)
            || records[0].timestamp != h.base_timestamp
        {
            continue;
        }
        let headers: Vec<Vec<kafkalite::storage::record::Header<'_>>> =
            records.iter().map(|r| r.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect()).collect();
        let mut b = BatchBuilder::new(Compression::None, None, 0);
        for (r, hs) in records.iter().zip(&headers) {
            b.push(&RecordInput {
                key: r.key.as_deref(),
                value: r.value.as_deref(),
                headers: hs,
                timestamp: r.timestamp,
            });
        }
        let (mut ours, _) = b.finish(h.base_offset).unwrap();
        // Producer-side header fields we do not control: copy them, then re-CRC.
        let mut theirs_header = BatchHeader::parse(&ours).unwrap();
        theirs_header.partition_leader_epoch = h.partition_leader_epoch;
        theirs_header.producer_id = h.producer_id;
        theirs_header.producer_epoch = h.producer_epoch;
        theirs_header.base_sequence = h.base_sequence;
        theirs_header.max_timestamp = h.max_timestamp;
        theirs_header.write(&mut ours);
        theirs_header.crc = compute_crc(&ours);
        theirs_header.write(&mut ours);
        assert_eq!(hex::encode(&ours), hex::encode(&bytes), "{}", case["name"]);
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} vectors re-encoded");
}

/// Real `__consumer_offsets` records of a Kafka 4.1 broker (tests/support/vectors/consumer_offsets.json):
/// group metadata (type 2) holds no offsets, OffsetCommitValue v4 decodes, and the key kafkalite
/// writes for the same commit is the broker's byte for byte (both write OffsetCommitKey v1).
#[test]
fn consumer_offsets_records_of_a_kafka_broker() {
    use kafkalite::coordination::offsets_codec::{decode_key, decode_value, encode_key, offsets_partition};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/vectors/consumer_offsets.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut commits = Vec::new();
    for r in v["records"].as_array().unwrap() {
        assert_eq!(r["partition"], format!("__consumer_offsets-{}", offsets_partition("billing")));
        let key = unhex(&r["key_hex"]);
        match decode_key(&key).unwrap() {
            None => assert_eq!(&key[..2], [0, 2]),
            Some(k) => {
                assert_eq!(k, ("billing".to_string(), "orders".to_string(), 0));
                assert_eq!(encode_key("billing", "orders", 0).unwrap(), key);
                commits.push(decode_value(&unhex(&r["value_hex"])).unwrap());
            }
        }
    }
    assert_eq!(commits, [(7, "nöte".to_string()), (10, String::new())]);
}
