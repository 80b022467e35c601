//! `kafkalite serve --metrics HOST:PORT`: the server's counters, kept for Prometheus's text page.
//!
//! The hot path only bumps plain atomics: one per answered request (by API key), one add per
//! request and response frame for the bytes in and out. Error codes are counted from the typed
//! response each request is answered with (`ErrorCodes`): its top-level code and every
//! topic's, partition's or group's; a request answering several errors counts each. Those are
//! rare, so they sit in a mutex-guarded map. Everything else (partitions, groups, consumer lag)
//! is read from the broker when Prometheus scrapes, never kept up to date on the way.
//! The page itself is `network::metrics_page`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Encodable;

use super::locks::lock;
use crate::server::codes;
use crate::server::request::DecodeError;

/// Enough slots for every API key Kafka defines (they are below 100).
const API_KEYS: usize = 128;

/// The server's counters (one per broker).
pub struct Metrics {
    pub(crate) requests: Vec<AtomicU64>,
    pub(crate) errors: Mutex<BTreeMap<(i16, i16), u64>>,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: (0..API_KEYS).map(|_| AtomicU64::new(0)).collect(),
            errors: Mutex::new(BTreeMap::new()),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
        }
    }
}

thread_local! {
    /// The error codes of the response `frame` just encoded on this thread, taken by the
    /// `dispatch::handle` that called it (directly, or through `fetch::answer`): nothing awaits
    /// between the two, so the same thread runs both (the task cannot move in between).
    static ANSWERED: RefCell<Vec<i16>> = const { RefCell::new(Vec::new()) };
}

/// `dispatch::frame`, noting the response's non-zero error codes for `Metrics::answered`.
pub fn frame<T: Encodable + ErrorCodes>(key: ApiKey, v: i16, id: i32, body: &T) -> Result<Bytes, DecodeError> {
    let bytes = crate::server::request::frame(key, v, id, body)?;
    ANSWERED.with(|codes| {
        let mut codes = codes.borrow_mut();
        body.error_codes(&mut |c| {
            if c != codes::NONE {
                codes.push(c)
            }
        });
    });
    Ok(bytes)
}

impl Metrics {
    /// One request of `key` answered (by `frame` above, just before, on this thread).
    pub fn answered(&self, key: ApiKey) {
        if let Some(n) = self.requests.get(key as i16 as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let codes = ANSWERED.with(|c| std::mem::take(&mut *c.borrow_mut()));
        if !codes.is_empty() {
            let mut errors = lock(&self.errors);
            for code in codes {
                *errors.entry((key as i16, code)).or_default() += 1;
            }
        }
    }

    pub fn bytes_in(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn bytes_out(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// The error codes a response carries: its own and each topic's, partition's or group's.
pub trait ErrorCodes {
    fn error_codes(&self, f: &mut dyn FnMut(i16));
}

macro_rules! error_codes {
    ($($t:ty => |$r:ident, $f:ident| $body:expr;)*) => {$(
        impl ErrorCodes for $t {
            fn error_codes(&self, $f: &mut dyn FnMut(i16)) {
                let $r = self;
                $body
            }
        }
    )*};
}

error_codes! {
    ApiVersionsResponse => |r, f| f(r.error_code);
    MetadataResponse => |r, f| for t in &r.topics {
        f(t.error_code);
        t.partitions.iter().for_each(|p| f(p.error_code));
    };
    CreateTopicsResponse => |r, f| r.topics.iter().for_each(|t| f(t.error_code));
    ProduceResponse => |r, f| r.responses.iter().flat_map(|t| &t.partition_responses).for_each(|p| f(p.error_code));
    FetchResponse => |r, f| {
        f(r.error_code);
        r.responses.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    };
    FindCoordinatorResponse => |r, f| {
        f(r.error_code);
        r.coordinators.iter().for_each(|c| f(c.error_code));
    };
    OffsetCommitResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    OffsetFetchResponse => |r, f| {
        f(r.error_code);
        r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
        for g in &r.groups {
            f(g.error_code);
            g.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
        }
    };
    JoinGroupResponse => |r, f| f(r.error_code);
    SyncGroupResponse => |r, f| f(r.error_code);
    HeartbeatResponse => |r, f| f(r.error_code);
    LeaveGroupResponse => |r, f| {
        f(r.error_code);
        r.members.iter().for_each(|m| f(m.error_code));
    };
    DescribeGroupsResponse => |r, f| r.groups.iter().for_each(|g| f(g.error_code));
    ListGroupsResponse => |r, f| f(r.error_code);
    ConsumerGroupHeartbeatResponse => |r, f| f(r.error_code);
    ConsumerGroupDescribeResponse => |r, f| r.groups.iter().for_each(|g| f(g.error_code));
    ListOffsetsResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    InitProducerIdResponse => |r, f| f(r.error_code);
    DeleteGroupsResponse => |r, f| r.results.iter().for_each(|g| f(g.error_code));
    DeleteTopicsResponse => |r, f| r.responses.iter().for_each(|t| f(t.error_code));
    CreatePartitionsResponse => |r, f| r.results.iter().for_each(|t| f(t.error_code));
    DescribeConfigsResponse => |r, f| r.results.iter().for_each(|t| f(t.error_code));
    AlterConfigsResponse => |r, f| r.responses.iter().for_each(|t| f(t.error_code));
    IncrementalAlterConfigsResponse => |r, f| r.responses.iter().for_each(|t| f(t.error_code));
    DeleteRecordsResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    DescribeClusterResponse => |r, f| f(r.error_code);
    OffsetDeleteResponse => |r, f| {
        f(r.error_code);
        r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    };
    DescribeLogDirsResponse => |r, f| {
        f(r.error_code);
        r.results.iter().for_each(|d| f(d.error_code));
    };
    AddPartitionsToTxnResponse => |r, f| {
        f(r.error_code);
        let v3 = r.results_by_topic_v3_and_below.iter();
        let v4 = r.results_by_transaction.iter().flat_map(|t| &t.topic_results);
        v3.chain(v4).flat_map(|t| &t.results_by_partition).for_each(|p| f(p.partition_error_code));
    };
    AddOffsetsToTxnResponse => |r, f| f(r.error_code);
    EndTxnResponse => |r, f| f(r.error_code);
    TxnOffsetCommitResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    DescribeProducersResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    DescribeTransactionsResponse => |r, f| r.transaction_states.iter().for_each(|t| f(t.error_code));
    ListTransactionsResponse => |r, f| f(r.error_code);
    CreateAclsResponse => |r, f| r.results.iter().for_each(|a| f(a.error_code));
    DescribeAclsResponse => |r, f| f(r.error_code);
    DeleteAclsResponse => |r, f| r.filter_results.iter().for_each(|a| f(a.error_code));
    AlterUserScramCredentialsResponse => |r, f| r.results.iter().for_each(|u| f(u.error_code));
    DescribeUserScramCredentialsResponse => |r, f| {
        f(r.error_code);
        r.results.iter().for_each(|u| f(u.error_code))
    };
    DescribeClientQuotasResponse => |r, f| f(r.error_code);
    AlterClientQuotasResponse => |r, f| r.entries.iter().for_each(|e| f(e.error_code));
}
