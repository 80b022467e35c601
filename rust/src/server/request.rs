//! A request as the network reads it and an answer as it writes it: the table of APIs this
//! server implements (what ApiVersions advertises), a request's header and decoded body, and a
//! response framed with its size. Kept apart from `dispatch` (which routes a request to its
//! handler) so that the network and the handlers share these types without importing each other.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeProducersRequest, DescribeTransactionsRequest,
    EndTxnRequest, ListTransactionsRequest, TxnOffsetCommitRequest,
};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterUserScramCredentialsRequest, DescribeClientQuotasRequest,
    DescribeUserScramCredentialsRequest,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, ApiKey, ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest,
    DeleteRecordsRequest, DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest,
    DescribeLogDirsRequest, FetchRequest, FindCoordinatorRequest, HeartbeatRequest, IncrementalAlterConfigsRequest,
    InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, ProduceRequest, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest,
};
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest};
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::{Decodable, Encodable};

/// The APIs and versions implemented here: exactly what ApiVersions advertises. The upper
/// bounds are what current clients negotiate (Java 3.x/4.x, librdkafka 2.x, kafka-python)
/// and stop before versions that need topic ids (Fetch 13+, Produce 13+).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    // Produce v12: a transactional one adds its partitions to the transaction (KIP-890 part 2).
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 0, 12),
    // ApiVersions v3+ carries the features (`FEATURES`); v4 with those whose lowest level is 0.
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::FindCoordinator, 0, 4),
    // OffsetCommit v9: a consumer-protocol member commits with its member epoch (KIP-848).
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 4),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::InitProducerId, 0, 5),
    // Transactions at Kafka's transaction version 2 (KIP-890 part 2, finalized in `FEATURES`):
    // EndTxn 5 bumps the epoch at every end, TxnOffsetCommit 5 adds the group's partition
    // itself; older versions keep version 0's rules (`txn_api`).
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

fn supported(key: ApiKey, version: i16) -> bool {
    SUPPORTED.iter().any(|&(k, min, max)| k == key && (min..=max).contains(&version))
}

/// A decoded request body.
#[derive(Debug)]
pub enum Body {
    Produce(ProduceRequest),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    Metadata(MetadataRequest),
    ApiVersions(ApiVersionsRequest),
    CreateTopics(CreateTopicsRequest),
    FindCoordinator(FindCoordinatorRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    DescribeGroups(DescribeGroupsRequest),
    ListGroups(ListGroupsRequest),
    InitProducerId(InitProducerIdRequest),
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
    EndTxn(EndTxnRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    DescribeProducers(DescribeProducersRequest),
    DescribeTransactions(DescribeTransactionsRequest),
    ListTransactions(ListTransactionsRequest),
    DeleteGroups(DeleteGroupsRequest),
    DeleteTopics(DeleteTopicsRequest),
    CreatePartitions(CreatePartitionsRequest),
    DescribeConfigs(DescribeConfigsRequest),
    AlterConfigs(AlterConfigsRequest),
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    DeleteRecords(DeleteRecordsRequest),
    DescribeCluster(DescribeClusterRequest),
    OffsetDelete(OffsetDeleteRequest),
    DescribeLogDirs(DescribeLogDirsRequest),
    CreateAcls(CreateAclsRequest),
    DescribeAcls(DescribeAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    DescribeClientQuotas(DescribeClientQuotasRequest),
    AlterClientQuotas(AlterClientQuotasRequest),
    DescribeUserScramCredentials(DescribeUserScramCredentialsRequest),
    AlterUserScramCredentials(AlterUserScramCredentialsRequest),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest),
    ConsumerGroupDescribe(ConsumerGroupDescribeRequest),
    SaslHandshake(SaslHandshakeRequest),
    SaslAuthenticate(SaslAuthenticateRequest),
    /// ApiVersions at a version we do not know: answered with UNSUPPORTED_VERSION at v0,
    /// so the client can retry with one we do (Kafka's behaviour).
    ApiVersionsUnsupported,
}

#[derive(Debug)]
pub struct Request {
    pub header: RequestHeader,
    pub key: ApiKey,
    pub body: Body,
}

/// Why a frame cannot be answered; the connection is closed, as Kafka does.
#[derive(Debug)]
pub struct DecodeError(pub String);

fn decode<T: Decodable>(buf: &mut Bytes, version: i16) -> Result<T, DecodeError> {
    T::decode(buf, version).map_err(|e| DecodeError(format!("cannot decode the request body: {e}")))
}

/// Decode one frame (without its size prefix): header, then the body of a supported API.
/// Never panics, whatever the bytes.
pub fn decode_request(frame: Bytes) -> Result<Request, DecodeError> {
    let mut buf = frame;
    if buf.len() < 8 {
        return Err(DecodeError(format!("a {}-byte frame is too short for a request header", buf.len())));
    }
    let (raw_key, version) = (i16::from_be_bytes([buf[0], buf[1]]), i16::from_be_bytes([buf[2], buf[3]]));
    let key = ApiKey::try_from(raw_key).map_err(|_| DecodeError(format!("unknown API key {raw_key}")))?;
    if !supported(key, version) {
        if key == ApiKey::ApiVersions && version >= 0 {
            // Only the correlation id matters: the header's later fields may have a layout we do not know.
            let correlation_id = (&buf[4..8]).get_i32();
            let header = RequestHeader::default()
                .with_request_api_key(raw_key)
                .with_request_api_version(version)
                .with_correlation_id(correlation_id);
            return Ok(Request { header, key, body: Body::ApiVersionsUnsupported });
        }
        return Err(DecodeError(format!("{key:?} version {version} is not supported")));
    }
    let header: RequestHeader = decode(&mut buf, key.request_header_version(version))?;
    let body = match key {
        ApiKey::Produce => Body::Produce(decode(&mut buf, version)?),
        ApiKey::Fetch => Body::Fetch(decode(&mut buf, version)?),
        ApiKey::ListOffsets => Body::ListOffsets(decode(&mut buf, version)?),
        ApiKey::Metadata => Body::Metadata(decode(&mut buf, version)?),
        ApiKey::ApiVersions => Body::ApiVersions(decode(&mut buf, version)?),
        ApiKey::CreateTopics => Body::CreateTopics(decode(&mut buf, version)?),
        ApiKey::FindCoordinator => Body::FindCoordinator(decode(&mut buf, version)?),
        ApiKey::OffsetCommit => Body::OffsetCommit(decode(&mut buf, version)?),
        ApiKey::OffsetFetch => Body::OffsetFetch(decode(&mut buf, version)?),
        ApiKey::JoinGroup => Body::JoinGroup(decode(&mut buf, version)?),
        ApiKey::SyncGroup => Body::SyncGroup(decode(&mut buf, version)?),
        ApiKey::Heartbeat => Body::Heartbeat(decode(&mut buf, version)?),
        ApiKey::LeaveGroup => Body::LeaveGroup(decode(&mut buf, version)?),
        ApiKey::DescribeGroups => Body::DescribeGroups(decode(&mut buf, version)?),
        ApiKey::ListGroups => Body::ListGroups(decode(&mut buf, version)?),
        ApiKey::InitProducerId => Body::InitProducerId(decode(&mut buf, version)?),
        ApiKey::AddPartitionsToTxn => Body::AddPartitionsToTxn(decode(&mut buf, version)?),
        ApiKey::AddOffsetsToTxn => Body::AddOffsetsToTxn(decode(&mut buf, version)?),
        ApiKey::EndTxn => Body::EndTxn(decode(&mut buf, version)?),
        ApiKey::TxnOffsetCommit => Body::TxnOffsetCommit(decode(&mut buf, version)?),
        ApiKey::DescribeProducers => Body::DescribeProducers(decode(&mut buf, version)?),
        ApiKey::DescribeTransactions => Body::DescribeTransactions(decode(&mut buf, version)?),
        ApiKey::ListTransactions => Body::ListTransactions(decode(&mut buf, version)?),
        ApiKey::DeleteGroups => Body::DeleteGroups(decode(&mut buf, version)?),
        ApiKey::DeleteTopics => Body::DeleteTopics(decode(&mut buf, version)?),
        ApiKey::CreatePartitions => Body::CreatePartitions(decode(&mut buf, version)?),
        ApiKey::DescribeConfigs => Body::DescribeConfigs(decode(&mut buf, version)?),
        ApiKey::AlterConfigs => Body::AlterConfigs(decode(&mut buf, version)?),
        ApiKey::IncrementalAlterConfigs => Body::IncrementalAlterConfigs(decode(&mut buf, version)?),
        ApiKey::DeleteRecords => Body::DeleteRecords(decode(&mut buf, version)?),
        ApiKey::DescribeCluster => Body::DescribeCluster(decode(&mut buf, version)?),
        ApiKey::OffsetDelete => Body::OffsetDelete(decode(&mut buf, version)?),
        ApiKey::DescribeLogDirs => Body::DescribeLogDirs(decode(&mut buf, version)?),
        ApiKey::CreateAcls => Body::CreateAcls(decode(&mut buf, version)?),
        ApiKey::DescribeAcls => Body::DescribeAcls(decode(&mut buf, version)?),
        ApiKey::DeleteAcls => Body::DeleteAcls(decode(&mut buf, version)?),
        ApiKey::DescribeClientQuotas => Body::DescribeClientQuotas(decode(&mut buf, version)?),
        ApiKey::AlterClientQuotas => Body::AlterClientQuotas(decode(&mut buf, version)?),
        ApiKey::DescribeUserScramCredentials => Body::DescribeUserScramCredentials(decode(&mut buf, version)?),
        ApiKey::AlterUserScramCredentials => Body::AlterUserScramCredentials(decode(&mut buf, version)?),
        ApiKey::ConsumerGroupHeartbeat => Body::ConsumerGroupHeartbeat(decode(&mut buf, version)?),
        ApiKey::ConsumerGroupDescribe => Body::ConsumerGroupDescribe(decode(&mut buf, version)?),
        ApiKey::SaslHandshake => Body::SaslHandshake(decode(&mut buf, version)?),
        ApiKey::SaslAuthenticate => Body::SaslAuthenticate(decode(&mut buf, version)?),
        other => return Err(DecodeError(format!("{other:?} is not supported"))),
    };
    Ok(Request { header, key, body })
}

/// Encode `header + body` with its size prefix.
pub fn frame<T: Encodable>(key: ApiKey, version: i16, correlation_id: i32, body: &T) -> Result<Bytes, DecodeError> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = key.response_header_version(version);
    // Sized before encoding: a buffer grown by doubling would hold up to twice a large Fetch
    // response (plus the copy made at each growth) while it is encoded, which the response
    // budget (`frame::QUEUED_MAX_RESPONSE_BYTES`) does not count.
    let body_size = body.compute_size(version).unwrap_or(0);
    let mut out = BytesMut::with_capacity(4 + 64 + body_size);
    out.extend_from_slice(&[0; 4]);
    header
        .encode(&mut out, header_version)
        .and_then(|_| body.encode(&mut out, version))
        .map_err(|e| DecodeError(format!("cannot encode the {key:?} v{version} response: {e}")))?;
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

/// What `handle` gives back: a response now (`None` when Kafka sends none: Produce with
/// acks=0), or a Produce's, which comes once the sync its acks=all waits for is done (its
/// batches are appended already: `pipeline`), or a response now and work to start once it is
/// written (or its write failed): EndTxn's markers (`txn_ends`).
pub enum Answer {
    Now(Option<Bytes>),
    Later(crate::server::network::pipeline::Waiting),
    Then(Bytes, AfterAnswer),
}

/// What starts once an `Answer::Then` is written.
pub type AfterAnswer = Box<dyn FnOnce() + Send>;
