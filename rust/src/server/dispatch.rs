//! Request headers, the table of APIs this server implements (what ApiVersions
//! advertises), and routing each decoded request to its API family (SaslHandshake and
//! SaslAuthenticate go to the connection's `sasl::Session` instead: they change its state).

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeProducersRequest, DescribeTransactionsRequest,
    EndTxnRequest, ListTransactionsRequest, TxnOffsetCommitRequest,
};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterUserScramCredentialsRequest, DescribeClientQuotasRequest,
    DescribeUserScramCredentialsRequest,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, ApiKey, ApiVersionsRequest, ApiVersionsResponse, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, DescribeLogDirsRequest, FetchRequest, FindCoordinatorRequest, HeartbeatRequest,
    IncrementalAlterConfigsRequest, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
    ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, ProduceRequest,
    RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest,
};
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest};
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::codes;
use super::handlers::{
    acl_api, client_quotas, cluster, configs, consumer_group_api, delete_records, describe_producers, fetch,
    find_coordinator, group_api, groups_admin, init_producer_id, list_offsets, log_dirs, metadata, offset_commit,
    offset_delete, produce, scram_admin, topics_admin, transactions_admin, txn_api,
};
use super::security::acl_requests;
use super::state::{quotas, txn_ends, waits};
use crate::server::security::authorizer::Who;
use crate::server::state::broker::Broker;
use crate::transactions::{TRANSACTION_VERSION_FEATURE, TV_0, TV_2};

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

/// The features ApiVersions v3+ names (KIP-584, KIP-1022), as a Kafka 4 broker does: (name,
/// lowest and highest level supported, level finalized). `transaction.version` 2 is what makes
/// a Java 4.x producer use KIP-890 part 2 (`TransactionManager.isTransactionV2Enabled`); one
/// that negotiates older versions keeps version 0's rules.
const FEATURES: &[(&str, i16, i16, i16)] = &[(TRANSACTION_VERSION_FEATURE, TV_0, TV_2, TV_2)];

/// The epoch of the finalized features: they never change while a server runs. At least 0, or
/// clients ignore them (a Java client takes them when the epoch is above the one it has, -1).
const FINALIZED_FEATURES_EPOCH: i64 = 1;

fn api_versions(error_code: i16, version: i16) -> ApiVersionsResponse {
    let keys = SUPPORTED
        .iter()
        .map(|&(k, min, max)| ApiVersion::default().with_api_key(k as i16).with_min_version(min).with_max_version(max))
        .collect();
    let response = ApiVersionsResponse::default().with_error_code(error_code).with_api_keys(keys);
    if version < 3 {
        return response;
    }
    // v3 leaves out a supported feature whose lowest level is 0, as Kafka does (KAFKA-17011:
    // clients before v4 refuse it); its finalized level is there in both.
    let supported = FEATURES
        .iter()
        .filter(|&&(_, min, _, _)| version >= 4 || min > 0)
        .map(|&(name, min, max, _)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    let finalized = FEATURES
        .iter()
        .map(|&(name, _, _, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
        .collect();
    response
        .with_supported_features(supported)
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(finalized)
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

/// Run a handler that may block (open a partition, wait up to `waits::LOCK_WAIT` for another
/// process's lock, rewrite a file) off the request workers, so ApiVersions, Metadata and
/// requests for other partitions and groups are answered meanwhile. No free slot for it by the
/// deadline (every slot busy with such waits): the connection is closed, as for a request the
/// server cannot serve; the client reconnects and retries.
async fn blocking<T: Send + 'static>(
    broker: &Arc<Broker>,
    key: ApiKey,
    handler: impl FnOnce(&Broker) -> T + Send + 'static,
) -> Result<T, DecodeError> {
    waits::off_workers(broker, waits::deadline(0), handler).await.map_err(|why| match why {
        waits::NotDone::Busy => {
            DecodeError(format!("{key:?}: no slot for blocking work came free in time (server busy)"))
        }
        waits::NotDone::Panicked => DecodeError(format!("{key:?}: the request panicked (a bug)")),
        waits::NotDone::Stopped => DecodeError(format!("{key:?}: the server is stopping")),
    })
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

/// Answer one request of `who`.
pub async fn handle(broker: &Arc<Broker>, mut request: Request, peer: &str, who: &Who) -> Result<Answer, DecodeError> {
    // Shadows this module's `frame`: the same bytes, with the response's error codes noted.
    use crate::server::state::metrics::frame;
    let v = request.header.request_api_version;
    let id = request.header.correlation_id;
    let key = request.key;
    // The ACLs, before any handler runs (`acl_requests`); listings are filtered below.
    let refused = match acl_requests::check(broker, who, &mut request, peer)? {
        acl_requests::Verdict::Refuse(refusal) => {
            broker.metrics.answered(key);
            return Ok(Answer::Now(Some(refusal)));
        }
        acl_requests::Verdict::Serve(refused) => refused,
    };
    let listing = acl_requests::Listing::new(broker, who, peer);
    // The client's address for the handlers that run off the workers (they outlive this borrow).
    let client = peer.to_string();
    let response = match request.body {
        Body::ApiVersions(_) => frame(key, v, id, &api_versions(codes::NONE, v))?,
        Body::ApiVersionsUnsupported => frame(key, 0, id, &api_versions(codes::UNSUPPORTED_VERSION, 0))?,
        Body::Metadata(mut r) => {
            let cut = listing.metadata_before(&mut r, v);
            frame(key, v, id, &listing.metadata_after(cut, metadata::metadata(broker, r, v, peer).await))?
        }
        Body::CreateTopics(r) => {
            frame(key, v, id, &refused.create_topics(metadata::create_topics(broker, r, v, peer).await))?
        }
        Body::Produce(r) => {
            if let Some(txn) = &r.transactional_id {
                txn_ends::settled(broker, txn, waits::deadline(r.timeout_ms)).await;
            }
            let client_id = request.header.client_id.as_deref().unwrap_or_default();
            let user = quotas::user_of(&who.principal);
            broker.quotas.wait_turn(quotas::Kind::Produce, user, client_id).await;
            let bytes =
                r.topic_data.iter().flat_map(|t| &t.partition_data).map(|p| p.records.as_ref().map_or(0, |b| b.len()));
            let throttle = broker.quotas.record(quotas::Kind::Produce, user, client_id, bytes.sum());
            let produced = produce::produce(broker, r, v, peer).await;
            let waits = produced.waits();
            let broker = Arc::clone(broker);
            let answer = async move {
                let response = match produced.answer(&broker).await {
                    Some(resp) => Some(frame(key, v, id, &refused.produce(resp).with_throttle_time_ms(throttle))?),
                    None => None,
                };
                broker.metrics.answered(key);
                Ok(response)
            };
            return Ok(if waits {
                Answer::Later(crate::server::network::pipeline::Waiting::spawn(answer))
            } else {
                Answer::Now(answer.await?)
            });
        }
        Body::Fetch(r) => {
            let quota = (quotas::user_of(&who.principal), request.header.client_id.as_deref().unwrap_or_default());
            fetch::answer(broker, r, (v, id), (peer, quota), refused.fetch()).await?
        }
        Body::FindCoordinator(r) => {
            frame(key, v, id, &find_coordinator::find_coordinator(broker, r, v, peer, &listing))?
        }
        Body::OffsetCommit(r) => {
            let committed = blocking(broker, key, move |b| offset_commit::offset_commit(b, r, v, &client)).await?;
            frame(key, v, id, &refused.offset_commit(committed))?
        }
        Body::OffsetFetch(r) => {
            let who = who.clone();
            let fetched = blocking(broker, key, move |b| offset_commit::offset_fetch(b, r, v, &client, &who)).await?;
            frame(key, v, id, &refused.offset_fetch(fetched))?
        }
        Body::JoinGroup(r) => {
            let client_id = request.header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
            frame(key, v, id, &group_api::join_group(broker, r, v, &client_id, peer).await)?
        }
        Body::SyncGroup(r) => frame(key, v, id, &group_api::sync_group(broker, r, v, peer).await)?,
        Body::Heartbeat(r) => frame(key, v, id, &group_api::heartbeat(broker, r, peer))?,
        Body::LeaveGroup(r) => frame(key, v, id, &group_api::leave_group(broker, r, v, peer))?,
        // These read committed offsets, opening `__consumer_offsets` partitions.
        Body::DescribeGroups(r) => {
            frame(key, v, id, &blocking(broker, key, move |b| group_api::describe_groups(b, r)).await?)?
        }
        Body::ListGroups(r) => {
            let groups = blocking(broker, key, move |b| group_api::list_groups(b, r, v)).await?;
            frame(key, v, id, &listing.list_groups(groups))?
        }
        Body::ListOffsets(r) => {
            let listed = blocking(broker, key, move |b| list_offsets::list_offsets(b, r, v, &client)).await?;
            frame(key, v, id, &refused.list_offsets(listed))?
        }
        // A request of a transactional id whose decided end is still being completed waits for
        // it first (`txn_ends`).
        Body::InitProducerId(r) => {
            let txn = r.transactional_id.iter().map(|t| t.to_string()).collect();
            txn_ends::all_settled(broker, txn, waits::deadline(0)).await;
            frame(
                key,
                v,
                id,
                &blocking(broker, key, move |b| init_producer_id::init_producer_id(b, r, v, &client)).await?,
            )?
        }
        // The transaction coordinator's calls may wait for a transactional id's lock (held by an
        // embedded producer, maybe stopped) and write durably.
        Body::AddPartitionsToTxn(r) => {
            let txns = r.transactions.iter().map(|t| t.transactional_id.to_string());
            let txns = txns.chain((v <= 3).then(|| r.v3_and_below_transactional_id.to_string())).collect();
            txn_ends::all_settled(broker, txns, waits::deadline(0)).await;
            frame(key, v, id, &blocking(broker, key, move |b| txn_api::add_partitions_to_txn(b, r, v, &client)).await?)?
        }
        Body::AddOffsetsToTxn(r) => {
            txn_ends::settled(broker, &r.transactional_id, waits::deadline(0)).await;
            frame(key, v, id, &blocking(broker, key, move |b| txn_api::add_offsets_to_txn(b, r, v, &client)).await?)?
        }
        Body::EndTxn(r) => {
            txn_ends::settled(broker, &r.transactional_id, waits::deadline(0)).await;
            let owner = Arc::clone(broker);
            let (answer, completion) = blocking(broker, key, move |b| {
                let (answer, pending) = txn_api::end_txn(b, r, v, &client);
                // From here the markers follow however this request ends (`txn_ends::Completion`).
                (answer, pending.map(|pending| txn_ends::Completion::new(owner, pending)))
            })
            .await?;
            let answer = frame(key, v, id, &answer)?;
            if let Some(completion) = completion {
                // The markers and Complete* are written once the answer is (`txn_ends`).
                broker.metrics.answered(key);
                return Ok(Answer::Then(answer, Box::new(move || drop(completion))));
            }
            answer
        }
        Body::TxnOffsetCommit(r) => {
            txn_ends::settled(broker, &r.transactional_id, waits::deadline(0)).await;
            frame(key, v, id, &blocking(broker, key, move |b| txn_api::txn_offset_commit(b, r, v, &client)).await?)?
        }
        Body::DescribeProducers(r) => frame(
            key,
            v,
            id,
            &blocking(broker, key, move |b| describe_producers::describe_producers(b, r, &client)).await?,
        )?,
        Body::DescribeTransactions(r) => frame(
            key,
            v,
            id,
            &listing.describe_transactions(
                blocking(broker, key, move |b| transactions_admin::describe_transactions(b, r, &client)).await?,
            ),
        )?,
        Body::ListTransactions(r) => {
            let listed =
                blocking(broker, key, move |b| transactions_admin::list_transactions(b, r, v, &client)).await?;
            frame(key, v, id, &listing.list_transactions(listed))?
        }
        Body::DeleteGroups(r) => {
            frame(key, v, id, &blocking(broker, key, move |b| groups_admin::delete_groups(b, r, &client)).await?)?
        }
        Body::DeleteTopics(r) => {
            let deleted = blocking(broker, key, move |b| topics_admin::delete_topics(b, r, v, &client)).await?;
            frame(key, v, id, &refused.delete_topics(deleted))?
        }
        Body::CreatePartitions(r) => {
            frame(key, v, id, &blocking(broker, key, move |b| topics_admin::create_partitions(b, r, &client)).await?)?
        }
        Body::DescribeConfigs(r) => frame(key, v, id, &configs::describe_configs(broker, r, v, peer))?,
        Body::AlterConfigs(r) => {
            frame(key, v, id, &blocking(broker, key, move |b| configs::alter_configs(b, r, &client)).await?)?
        }
        Body::IncrementalAlterConfigs(r) => frame(
            key,
            v,
            id,
            &blocking(broker, key, move |b| configs::incremental_alter_configs(b, r, &client)).await?,
        )?,
        Body::DeleteRecords(r) => {
            let deleted = blocking(broker, key, move |b| delete_records::delete_records(b, r, &client)).await?;
            frame(key, v, id, &refused.delete_records(deleted))?
        }
        Body::DescribeCluster(r) => frame(key, v, id, &cluster::describe_cluster(broker, r))?,
        Body::OffsetDelete(r) => {
            frame(key, v, id, &blocking(broker, key, move |b| offset_delete::offset_delete(b, r, &client)).await?)?
        }
        Body::DescribeLogDirs(r) => {
            frame(key, v, id, &blocking(broker, key, move |b| log_dirs::describe_log_dirs(b, r, &client)).await?)?
        }
        Body::CreateAcls(r) => {
            frame(key, v, id, &blocking(broker, key, move |b| acl_api::create_acls(b, r, &client)).await?)?
        }
        Body::DescribeAcls(r) => frame(key, v, id, &acl_api::describe_acls(broker, r, peer))?,
        Body::DeleteAcls(r) => {
            frame(key, v, id, &blocking(broker, key, move |b| acl_api::delete_acls(b, r, &client)).await?)?
        }
        Body::DescribeClientQuotas(r) => frame(key, v, id, &client_quotas::describe_client_quotas(broker, r, peer))?,
        // Rewrites the quota file under the data directory's admin lock.
        Body::AlterClientQuotas(r) => frame(
            key,
            v,
            id,
            &blocking(broker, key, move |b| client_quotas::alter_client_quotas(b, r, &client)).await?,
        )?,
        // These read (and rewrite) the users file under the data directory's admin lock.
        Body::DescribeUserScramCredentials(r) => frame(
            key,
            v,
            id,
            &blocking(broker, key, move |b| scram_admin::describe_user_scram_credentials(b, r, &client)).await?,
        )?,
        Body::AlterUserScramCredentials(r) => frame(
            key,
            v,
            id,
            &blocking(broker, key, move |b| scram_admin::alter_user_scram_credentials(b, r, &client)).await?,
        )?,
        // Claiming a new group touches its folder (`group_owner`).
        Body::ConsumerGroupHeartbeat(r) => {
            let client_id = request.header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
            let who = who.clone();
            let answer = blocking(broker, key, move |b| {
                consumer_group_api::consumer_group_heartbeat(b, r, v, &client_id, &client, &who)
            });
            frame(key, v, id, &answer.await?)?
        }
        Body::ConsumerGroupDescribe(r) => {
            frame(key, v, id, &consumer_group_api::consumer_group_describe(broker, r, peer))?
        }
        // The connection's SASL session answers these (`sasl::Session::admit`) before dispatch.
        Body::SaslHandshake(_) | Body::SaslAuthenticate(_) => {
            return Err(DecodeError(format!("{key:?} reached dispatch without the connection's SASL session")))
        }
    };
    broker.metrics.answered(key);
    Ok(Answer::Now(Some(response)))
}
