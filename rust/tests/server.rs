//! The wire-protocol server against hostile input, over real TCP on 127.0.0.1: bad frame
//! sizes, unknown APIs and versions, garbage and truncated requests, stalled clients. The
//! offending connection is answered as Kafka does or closed; every other client keeps
//! being served; the process never panics or aborts. Plus a property test feeding random
//! bytes to the request decoder.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafkalite::server::{decode_request, Server, ServerConfig};
use proptest::prelude::*;

fn start(dir: &std::path::Path) -> Server {
    let mut config = ServerConfig::new(dir, "127.0.0.1:0");
    config.idle_timeout = Duration::from_secs(2);
    Server::start(config).unwrap()
}

fn connect(server: &Server) -> TcpStream {
    let s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn request<T: Encodable>(key: ApiKey, version: i16, correlation_id: i32, body: &T) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("test")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, key.request_header_version(version)).unwrap();
    body.encode(&mut buf, version).unwrap();
    let mut framed = (buf.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&buf);
    framed
}

/// Read one response frame; None when the server closed the connection.
fn read_response(s: &mut TcpStream) -> Option<Bytes> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}

fn api_versions(s: &mut TcpStream, version: i16) -> (i32, ApiVersionsResponse) {
    s.write_all(&request(ApiKey::ApiVersions, version, 7, &ApiVersionsRequest::default())).unwrap();
    let mut body = read_response(s).expect("an ApiVersions response");
    let header = ResponseHeader::decode(&mut body, 0).unwrap();
    (header.correlation_id, ApiVersionsResponse::decode(&mut body, 0.max(version.min(3))).unwrap())
}

fn closed(s: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(s.read(&mut byte), Ok(0))
}

#[test]
fn api_versions_advertises_what_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut s = connect(&server);
    let (id, resp) = api_versions(&mut s, 3);
    assert_eq!(id, 7);
    assert_eq!(resp.error_code, 0);
    let keys: Vec<i16> = resp.api_keys.iter().map(|k| k.api_key).collect();
    assert!(keys.contains(&(ApiKey::Produce as i16)) && keys.contains(&(ApiKey::Fetch as i16)));
}

#[test]
fn api_versions_at_an_unknown_version_gets_unsupported_version_at_v0() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut s = connect(&server);
    // Kafka answers a too-new ApiVersions with v0 + UNSUPPORTED_VERSION, so clients retry lower.
    let mut frame = BytesMut::new();
    frame.put_i16(ApiKey::ApiVersions as i16);
    frame.put_i16(99);
    frame.put_i32(42);
    frame.put_slice(b"whatever follows in a future header");
    let mut framed = (frame.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&frame);
    s.write_all(&framed).unwrap();
    let mut body = read_response(&mut s).unwrap();
    assert_eq!(ResponseHeader::decode(&mut body, 0).unwrap().correlation_id, 42);
    let resp = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(resp.error_code, 35);
    assert!(!resp.api_keys.is_empty());
}

/// Each hostile frame closes its own connection; a well-behaved client keeps being served.
#[test]
fn bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut good = connect(&server);
    let mut metadata_with_huge_array = vec![0u8, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
    // Metadata v0: client id null, then a topic array claiming 2^31-1 entries in 4 bytes.
    metadata_with_huge_array.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff, 0, 1]);
    let mut compact_huge = vec![0u8, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0];
    // Metadata v12 (flexible): a compact topic array claiming ~2^32 entries.
    compact_huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("negative size", (-5i32).to_be_bytes().to_vec()),
        ("over socket.request.max.bytes", (100 * 1024 * 1024 + 1i32).to_be_bytes().to_vec()),
        ("unknown api key", [&8i32.to_be_bytes()[..], &[0x7f, 0x00, 0, 0, 0, 0, 0, 1]].concat()),
        ("unsupported version", [&8i32.to_be_bytes()[..], &[0, 3, 0x7f, 0, 0, 0, 0, 1]].concat()),
        ("too short for a header", [&3i32.to_be_bytes()[..], &[0, 3, 0]].concat()),
        ("garbage body", [&12i32.to_be_bytes()[..], &[0, 0, 0, 9, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef]].concat()),
        (
            "huge array length",
            [&(metadata_with_huge_array.len() as i32).to_be_bytes()[..], &metadata_with_huge_array].concat(),
        ),
        ("huge compact array length", [&(compact_huge.len() as i32).to_be_bytes()[..], &compact_huge].concat()),
    ];
    for (what, bytes) in cases {
        let mut bad = connect(&server);
        bad.write_all(&bytes).unwrap();
        assert!(closed(&mut bad), "{what}: the connection should be closed");
        let (_, resp) = api_versions(&mut good, 3);
        assert_eq!(resp.error_code, 0, "{what}: the good client is still served");
    }
}

/// A client that announces a large frame and stops sending holds no memory beyond what it
/// sent, is dropped after the idle timeout, and blocks nobody meanwhile.
#[test]
fn stalled_and_idle_clients_do_not_block_others() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut stalled: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = connect(&server);
            s.write_all(&(90 * 1024 * 1024i32).to_be_bytes()).unwrap();
            s.write_all(&[0, 18, 0, 3]).unwrap();
            s
        })
        .collect();
    let idle: Vec<TcpStream> = (0..300).map(|_| connect(&server)).collect();
    let mut good = connect(&server);
    let started = std::time::Instant::now();
    let (_, resp) = api_versions(&mut good, 3);
    assert_eq!(resp.error_code, 0);
    assert!(started.elapsed() < Duration::from_secs(2));
    // connections.max.idle.ms (2 s here): the stalled ones are closed.
    assert!(closed(&mut stalled[0]));
    drop(idle);
}

#[test]
fn metadata_over_tcp_creates_topics_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut s = connect(&server);
    let topic = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
        .with_name(Some(kafka_protocol::messages::TopicName(StrBytes::from_static_str("auto"))));
    let req = MetadataRequest::default().with_topics(Some(vec![topic])).with_allow_auto_topic_creation(true);
    s.write_all(&request(ApiKey::Metadata, 12, 1, &req)).unwrap();
    let mut body = read_response(&mut s).unwrap();
    ResponseHeader::decode(&mut body, 1).unwrap();
    let resp = kafka_protocol::messages::MetadataResponse::decode(&mut body, 12).unwrap();
    assert_eq!(resp.topics[0].error_code, 0);
    assert_eq!(resp.brokers[0].port as u16, server.local_addr().port());
    let meta = std::fs::read_to_string(dir.path().join(".kafkalite-topics.json")).unwrap();
    assert!(meta.contains("\"auto\""), "{meta}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Random bytes never panic the decoder (a failure to decode is an error, not a crash).
    #[test]
    fn decoder_survives_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_request(Bytes::from(bytes));
    }

    /// Random bodies behind a valid header of every served API and version.
    #[test]
    fn decoder_survives_random_bodies(key in 0usize..kafkalite::server::SUPPORTED_APIS.len(), version in 0i16..14, body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let (api, min, max) = kafkalite::server::SUPPORTED_APIS[key];
        let version = min + version % (max - min + 1);
        let mut frame = BytesMut::new();
        frame.put_i16(api as i16);
        frame.put_i16(version);
        frame.put_i32(1);
        frame.put_slice(&body);
        let _ = decode_request(frame.freeze());
    }
}

/// Send one request and decode its response.
fn call<Req: Encodable, Resp: Decodable>(s: &mut TcpStream, key: ApiKey, version: i16, body: &Req) -> Resp {
    s.write_all(&request(key, version, 11, body)).unwrap();
    let mut reply = read_response(s).expect("a response");
    let header = ResponseHeader::decode(&mut reply, key.response_header_version(version)).unwrap();
    assert_eq!(header.correlation_id, 11);
    Resp::decode(&mut reply, version).unwrap()
}

/// The admin APIs' answers that librdkafka and kafka-python never let through (they check
/// first): requests naming what cannot exist get Kafka's codes from the server itself.
#[test]
fn admin_requests_for_what_does_not_exist_get_kafkas_codes() {
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{
        DeleteRecordsRequest, DeleteRecordsResponse, DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest,
        DescribeClusterResponse, DescribeConfigsRequest, DescribeConfigsResponse, TopicName,
    };

    let dir = tempfile::tempdir().unwrap();
    kafkalite::storage::datadir::DataDir::new(dir.path()).unwrap().create_topic("t", 1, &Default::default()).unwrap();
    let server = start(dir.path());
    let mut s = connect(&server);
    let name = |n: &str| TopicName(StrBytes::from_string(n.to_string()));

    let partitions =
        |p: i32, offset: i64| vec![DeleteRecordsPartition::default().with_partition_index(p).with_offset(offset)];
    let req = DeleteRecordsRequest::default().with_topics(vec![
        DeleteRecordsTopic::default().with_name(name("t")).with_partitions(partitions(5, 0)),
        DeleteRecordsTopic::default().with_name(name("nope")).with_partitions(partitions(0, 0)),
        DeleteRecordsTopic::default().with_name(name("../t")).with_partitions(partitions(0, 0)),
        DeleteRecordsTopic::default().with_name(name("t")).with_partitions(partitions(0, 1)),
    ]);
    let resp: DeleteRecordsResponse = call(&mut s, ApiKey::DeleteRecords, 2, &req);
    let codes: Vec<i16> = resp.topics.iter().map(|t| t.partitions[0].error_code).collect();
    assert_eq!(codes, [3, 3, 3, 1]); // UNKNOWN_TOPIC_OR_PARTITION x3, OFFSET_OUT_OF_RANGE

    let by_path = DeleteTopicState::default().with_name(Some(name("../t")));
    let resp: DeleteTopicsResponse =
        call(&mut s, ApiKey::DeleteTopics, 6, &DeleteTopicsRequest::default().with_topics(vec![by_path]));
    assert_eq!(resp.responses[0].error_code, 17); // INVALID_TOPIC_EXCEPTION

    let other_broker = DescribeConfigsResource::default().with_resource_type(4).with_resource_name("7".into());
    let group = DescribeConfigsResource::default().with_resource_type(32).with_resource_name("g".into());
    let req = DescribeConfigsRequest::default().with_resources(vec![other_broker, group]);
    let resp: DescribeConfigsResponse = call(&mut s, ApiKey::DescribeConfigs, 4, &req);
    assert_eq!(resp.results.iter().map(|r| r.error_code).collect::<Vec<_>>(), [42, 42]); // INVALID_REQUEST

    let resp: DescribeClusterResponse =
        call(&mut s, ApiKey::DescribeCluster, 1, &DescribeClusterRequest::default().with_endpoint_type(2));
    assert_eq!(resp.error_code, 119); // UNSUPPORTED_ENDPOINT_TYPE
    let resp: DescribeClusterResponse = call(&mut s, ApiKey::DescribeCluster, 0, &DescribeClusterRequest::default());
    assert_eq!((resp.error_code, resp.cluster_id.as_str(), resp.brokers.len()), (0, "kafkalite", 1));
    assert!(dir.path().join("t-0").is_dir(), "nothing deleted");
}

/// The transaction APIs no Python client sends (brokers and admin tools do): AddPartitionsToTxn
/// v4's batched and verify-only form, DescribeTransactions of an unknown id, ListTransactions'
/// state and producer-id filters (an unknown state name reported back), DescribeProducers'
/// open transaction (what holds the last stable offset back) and its end.
#[test]
fn transaction_admin_and_verification_requests_get_kafkas_answers() {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, DescribeProducersRequest, DescribeProducersResponse,
        DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse,
        InitProducerIdRequest, InitProducerIdResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
        TopicName, TransactionalId,
    };

    let dir = tempfile::tempdir().unwrap();
    kafkalite::storage::datadir::DataDir::new(dir.path()).unwrap().create_topic("t", 2, &Default::default()).unwrap();
    let server = start(dir.path());
    let mut s = connect(&server);
    let tid = |n: &str| TransactionalId(StrBytes::from_string(n.to_string()));
    let init =
        InitProducerIdRequest::default().with_transactional_id(Some(tid("v4"))).with_transaction_timeout_ms(60_000);
    let InitProducerIdResponse { error_code, producer_id, producer_epoch, .. } =
        call(&mut s, ApiKey::InitProducerId, 4, &init);
    assert_eq!(error_code, 0);
    let topic = |ps: Vec<i32>| AddPartitionsToTxnTopic::default().with_name(TopicName("t".into())).with_partitions(ps);
    let txn = |verify: bool, ps: Vec<i32>| {
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(tid("v4"))
            .with_producer_id(producer_id)
            .with_producer_epoch(producer_epoch)
            .with_verify_only(verify)
            .with_topics(vec![topic(ps)])
    };
    let codes = |r: &AddPartitionsToTxnResponse| -> Vec<i16> {
        r.results_by_transaction[0].topic_results[0]
            .results_by_partition
            .iter()
            .map(|p| p.partition_error_code)
            .collect()
    };
    // Verify before adding: INVALID_TXN_STATE (48); add partition 0; verify 0 and 1.
    let verify = AddPartitionsToTxnRequest::default().with_transactions(vec![txn(true, vec![0])]);
    assert_eq!(codes(&call(&mut s, ApiKey::AddPartitionsToTxn, 4, &verify)), [48]);
    let add = AddPartitionsToTxnRequest::default().with_transactions(vec![txn(false, vec![0])]);
    assert_eq!(codes(&call(&mut s, ApiKey::AddPartitionsToTxn, 5, &add)), [0]);
    let verify = AddPartitionsToTxnRequest::default().with_transactions(vec![txn(true, vec![0, 1])]);
    assert_eq!(codes(&call(&mut s, ApiKey::AddPartitionsToTxn, 4, &verify)), [0, 48]);
    // A partition that does not exist: it is UNKNOWN_TOPIC_OR_PARTITION, the rest not attempted.
    let add = AddPartitionsToTxnRequest::default().with_transactions(vec![txn(false, vec![1, 9])]);
    assert_eq!(codes(&call(&mut s, ApiKey::AddPartitionsToTxn, 4, &add)), [55, 3]);

    let describe = DescribeTransactionsRequest::default().with_transactional_ids(vec![tid("v4"), tid("nobody")]);
    let resp: DescribeTransactionsResponse = call(&mut s, ApiKey::DescribeTransactions, 0, &describe);
    let (known, unknown) = (&resp.transaction_states[0], &resp.transaction_states[1]);
    assert_eq!((known.error_code, known.transaction_state.as_str(), known.topics.len()), (0, "Ongoing", 1));
    assert_eq!(unknown.error_code, 105); // TRANSACTIONAL_ID_NOT_FOUND

    let list = |states: Vec<&str>, pids: Vec<i64>| {
        ListTransactionsRequest::default()
            .with_state_filters(states.into_iter().map(|st| StrBytes::from_string(st.to_string())).collect())
            .with_producer_id_filters(pids.into_iter().map(ProducerId).collect())
            .with_duration_filter(-1)
    };
    let resp: ListTransactionsResponse =
        call(&mut s, ApiKey::ListTransactions, 1, &list(vec!["Ongoing", "Bogus"], vec![]));
    assert_eq!(resp.transaction_states.len(), 1);
    assert_eq!(resp.unknown_state_filters.iter().map(|f| f.as_str()).collect::<Vec<_>>(), ["Bogus"]);
    let resp: ListTransactionsResponse = call(&mut s, ApiKey::ListTransactions, 0, &list(vec!["Empty"], vec![]));
    assert!(resp.transaction_states.is_empty());
    let resp: ListTransactionsResponse =
        call(&mut s, ApiKey::ListTransactions, 1, &list(vec![], vec![producer_id.0 + 1]));
    assert!(resp.transaction_states.is_empty());

    let end = EndTxnRequest::default()
        .with_transactional_id(tid("v4"))
        .with_producer_id(producer_id)
        .with_producer_epoch(producer_epoch)
        .with_committed(false);
    assert_eq!(call::<_, EndTxnResponse>(&mut s, ApiKey::EndTxn, 4, &end).error_code, 0);
    // The ABORT marker in t-0 is the producer's: known to the partition, no transaction open.
    // EndTxn is answered at its decision and the marker is written right after (`txn_ends`), so
    // the partition is asked until it lands.
    let producers = DescribeProducersRequest::default()
        .with_topics(vec![TopicRequest::default().with_name(TopicName("t".into())).with_partition_indexes(vec![0, 7])]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let resp: DescribeProducersResponse = call(&mut s, ApiKey::DescribeProducers, 0, &producers);
        let (p0, p7) = (&resp.topics[0].partitions[0], &resp.topics[0].partitions[1]);
        assert_eq!((p0.error_code, p7.error_code), (0, 3));
        let active: Vec<(i64, i64)> =
            p0.active_producers.iter().map(|p| (p.producer_id.0, p.current_txn_start_offset)).collect();
        if active == [(producer_id.0, -1)] || std::time::Instant::now() > deadline {
            assert_eq!(active, [(producer_id.0, -1)], "the ABORT marker never landed");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
