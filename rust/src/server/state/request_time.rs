//! Kafka's request quota (`request_percentage`, `ClientRequestQuotaManager`): the time the server
//! spends on a client's requests, as a percentage of one request worker, throttled past the quota
//! by `throttle_time_ms` and by holding that client's next request for as long (`quotas`).
//!
//! What is counted: the time the async request workers spend running the request's handling
//! (each poll of its future, from the ACL check to the encoded answer), plus the time its
//! blocking work holds a blocking slot (`waits::off_workers`: opening partitions, rewriting
//! files, waiting for a lock there). Not counted, as Kafka counts neither purgatory nor the
//! network threads: time the request waits (a Fetch's `max_wait_ms`, a Produce's acks=all sync,
//! a slot coming free, a throttle delay), and reading or writing the frame.
//!
//! Exempt, as Kafka's `sendResponseExemptThrottle`: ApiVersions and SASL (answered by the
//! connection's session before dispatch); kafkalite has none of Kafka's cluster-action APIs.
//! Produce and Fetch record their time themselves (`record_now`) so their answer carries the
//! larger of the byte-rate and request throttles, as Kafka's do; every other answer's
//! `throttle_time_ms` is set in its encoded frame (`with_throttle`).
//!
//! Without a request_percentage for the client nothing is measured: one atomic load.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

use super::quotas::QuotaManager;

/// One request's measurement, shared by its future and the work it sends off the workers.
struct Clock {
    user: String,
    client_id: String,
    spent_ns: AtomicU64,
    /// Produce or Fetch recorded the time already (`record_now`).
    recorded: AtomicBool,
}

tokio::task_local! {
    static CLOCK: Arc<Clock>;
}

/// Count `spent` against the request being served on this task, if one is measured.
pub fn add(spent: Duration) {
    let _ = CLOCK.try_with(|c| c.spent_ns.fetch_add(spent.as_nanos() as u64, Ordering::Relaxed));
}

/// Record the time of the request being served so far (Produce, Fetch: just before they build
/// their answer) and return its throttle time; 0 when the request is not measured.
pub fn record_now(quotas: &QuotaManager) -> i32 {
    CLOCK
        .try_with(|c| {
            if c.recorded.swap(true, Ordering::Relaxed) {
                return 0;
            }
            quotas.record_time(&c.user, &c.client_id, Duration::from_nanos(c.spent_ns.load(Ordering::Relaxed)))
        })
        .unwrap_or(0)
}

/// Adds each poll's time of the inner future to the task's clock.
struct Timed<F> {
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let start = Instant::now();
        let out = self.inner.as_mut().poll(cx);
        add(start.elapsed());
        out
    }
}

/// Whether Kafka never throttles `key` on the request quota.
pub fn exempt(key: ApiKey) -> bool {
    matches!(key, ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
}

/// Serve `serving` for `user`/`client_id` under their request quota: wait out a throttle their
/// last answer announced, measure, record; the output and the throttle time its answer must
/// carry (0 if Produce or Fetch already put it in theirs).
pub async fn measured<F: Future>(
    quotas: &QuotaManager,
    (user, client_id): (&str, &str),
    serving: F,
) -> (F::Output, i32) {
    quotas.wait_turn(super::quotas::Kind::Request, user, client_id).await;
    let clock = Arc::new(Clock {
        user: user.to_string(),
        client_id: client_id.to_string(),
        spent_ns: AtomicU64::new(0),
        recorded: AtomicBool::new(false),
    });
    let out = CLOCK.scope(Arc::clone(&clock), Timed { inner: Box::pin(serving) }).await;
    if clock.recorded.load(Ordering::Relaxed) {
        return (out, 0);
    }
    let spent = Duration::from_nanos(clock.spent_ns.load(Ordering::Relaxed));
    (out, quotas.record_time(user, client_id, spent))
}

/// Where `throttle_time_ms` is in the body of `key`'s response at `version`, if it has one:
/// the first field from the version that added it, except OffsetDelete (after its error code)
/// and Produce (its last field: set by `dispatch` itself). Checked against the encoder in the
/// tests below.
fn throttle_offset(key: ApiKey, version: i16) -> Option<usize> {
    let since = match key {
        ApiKey::Produce | ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => return None,
        ApiKey::OffsetDelete => return Some(2),
        ApiKey::Metadata | ApiKey::OffsetCommit | ApiKey::OffsetFetch => 3,
        ApiKey::ListOffsets | ApiKey::JoinGroup | ApiKey::CreateTopics => 2,
        ApiKey::Fetch
        | ApiKey::FindCoordinator
        | ApiKey::SyncGroup
        | ApiKey::Heartbeat
        | ApiKey::LeaveGroup
        | ApiKey::DescribeGroups
        | ApiKey::ListGroups
        | ApiKey::CreateAcls
        | ApiKey::DescribeAcls
        | ApiKey::DeleteAcls
        | ApiKey::DescribeConfigs
        | ApiKey::DeleteTopics
        | ApiKey::DescribeLogDirs => 1,
        _ => 0,
    };
    (version >= since).then_some(0)
}

/// `frame` (a response of `key` at `version`, size prefix first) with its `throttle_time_ms`
/// set to `throttle_ms`; unchanged where the version has no such field (Kafka's client is
/// still held back by the delay of its next request).
pub fn with_throttle(frame: Bytes, key: ApiKey, version: i16, throttle_ms: i32) -> Bytes {
    let Some(offset) = throttle_offset(key, version) else { return frame };
    // The size, the correlation id, and from header v1 an empty tagged-field count.
    let at = 4 + 4 + usize::from(key.response_header_version(version) >= 1) + offset;
    if frame.len() < at + 4 {
        return frame;
    }
    let mut out = BytesMut::from(&frame[..]);
    out[at..at + 4].copy_from_slice(&throttle_ms.to_be_bytes());
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::request::SUPPORTED;
    use kafka_protocol::messages::*;

    /// Every supported version of every response `with_throttle` patches: the bytes it writes
    /// are where the encoder puts `throttle_time_ms`.
    #[test]
    fn the_throttle_lands_in_the_field_at_every_version() {
        const MARK: i32 = 0x0a0b_0c0d;
        macro_rules! check {
            ($($key:ident => $t:ty),* $(,)?) => {$(
                let &(_, min, max) = SUPPORTED.iter().find(|(k, _, _)| *k == ApiKey::$key).unwrap();
                for v in min..=max {
                    let mut body = <$t>::default();
                    body.throttle_time_ms = MARK;
                    let marked = crate::server::request::frame(ApiKey::$key, v, 7, &body).ok();
                    let plain = crate::server::request::frame(ApiKey::$key, v, 7, &<$t>::default()).unwrap();
                    let patched = with_throttle(plain.clone(), ApiKey::$key, v, MARK);
                    match marked.filter(|m| *m != plain) {
                        Some(marked) => assert_eq!(patched, marked, "{:?} v{v}", ApiKey::$key),
                        None => assert_eq!(patched, plain, "{:?} v{v} has no throttle_time_ms", ApiKey::$key),
                    }
                }
            )*};
        }
        check!(
            Fetch => FetchResponse,
            ListOffsets => ListOffsetsResponse,
            Metadata => MetadataResponse,
            CreateTopics => CreateTopicsResponse,
            FindCoordinator => FindCoordinatorResponse,
            OffsetCommit => OffsetCommitResponse,
            OffsetFetch => OffsetFetchResponse,
            JoinGroup => JoinGroupResponse,
            SyncGroup => SyncGroupResponse,
            Heartbeat => HeartbeatResponse,
            LeaveGroup => LeaveGroupResponse,
            DescribeGroups => DescribeGroupsResponse,
            ListGroups => ListGroupsResponse,
            InitProducerId => InitProducerIdResponse,
            AddPartitionsToTxn => AddPartitionsToTxnResponse,
            AddOffsetsToTxn => AddOffsetsToTxnResponse,
            EndTxn => EndTxnResponse,
            TxnOffsetCommit => TxnOffsetCommitResponse,
            DescribeProducers => DescribeProducersResponse,
            DescribeTransactions => DescribeTransactionsResponse,
            ListTransactions => ListTransactionsResponse,
            DeleteGroups => DeleteGroupsResponse,
            DeleteTopics => DeleteTopicsResponse,
            CreatePartitions => CreatePartitionsResponse,
            DescribeConfigs => DescribeConfigsResponse,
            AlterConfigs => AlterConfigsResponse,
            IncrementalAlterConfigs => IncrementalAlterConfigsResponse,
            DeleteRecords => DeleteRecordsResponse,
            DescribeCluster => DescribeClusterResponse,
            OffsetDelete => OffsetDeleteResponse,
            DescribeLogDirs => DescribeLogDirsResponse,
            CreateAcls => CreateAclsResponse,
            DescribeAcls => DescribeAclsResponse,
            DeleteAcls => DeleteAclsResponse,
            DescribeClientQuotas => DescribeClientQuotasResponse,
            AlterClientQuotas => AlterClientQuotasResponse,
            DescribeUserScramCredentials => DescribeUserScramCredentialsResponse,
            AlterUserScramCredentials => AlterUserScramCredentialsResponse,
            ConsumerGroupHeartbeat => ConsumerGroupHeartbeatResponse,
            ConsumerGroupDescribe => ConsumerGroupDescribeResponse,
        );
    }
}
