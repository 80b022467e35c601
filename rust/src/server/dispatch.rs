//! Routing each decoded request (`request`) to its API family's handler, after the ACL check
//! (`handlers::acl_requests`), and answering ApiVersions (SaslHandshake and SaslAuthenticate go
//! to the connection's `sasl::Session` instead: they change its state). The one place the
//! network reaches the handlers.

use std::sync::Arc;

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;

use super::codes;
use super::handlers::{
    acl_api, acl_requests, client_quotas, cluster, configs, consumer_group_api, delete_records, describe_producers,
    fetch, find_coordinator, group_api, groups_admin, init_producer_id, list_offsets, log_dirs, metadata,
    offset_commit, offset_delete, produce, scram_admin, topics_admin, transactions_admin, txn_api,
};
use super::request::{Answer, Body, DecodeError, Request, SUPPORTED};

use super::state::{quotas, request_time, txn_ends, waits};
use crate::coordination::transactions::{TRANSACTION_VERSION_FEATURE, TV_0, TV_2};
use crate::server::security::authorizer::Who;
use crate::server::state::broker::Broker;

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

/// Answer one request of `who`, under the request quota of its user and client id if one
/// applies (`request_time`).
pub async fn handle(broker: &Arc<Broker>, request: Request, peer: &str, who: &Who) -> Result<Answer, DecodeError> {
    let (key, v) = (request.key, request.header.request_api_version);
    let user = quotas::user_of(&who.principal);
    let client_id = request.header.client_id.as_deref().unwrap_or_default();
    if request_time::exempt(key) || !broker.quotas.request_quota_applies(user, client_id) {
        return serve(broker, request, peer, who).await;
    }
    let client_id = client_id.to_string();
    let (answer, throttle) =
        request_time::measured(&broker.quotas, (user, &client_id), serve(broker, request, peer, who)).await;
    if throttle == 0 {
        return answer;
    }
    Ok(match answer? {
        Answer::Now(Some(bytes)) => Answer::Now(Some(request_time::with_throttle(bytes, key, v, throttle))),
        Answer::Then(bytes, after) => Answer::Then(request_time::with_throttle(bytes, key, v, throttle), after),
        other => other,
    })
}

async fn serve(broker: &Arc<Broker>, mut request: Request, peer: &str, who: &Who) -> Result<Answer, DecodeError> {
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
            // The larger of the byte-rate and request-time throttles, as Kafka's answer.
            let throttle = throttle.max(request_time::record_now(&broker.quotas));
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
