//! `kafkalite serve --metrics HOST:PORT`: the server's counters in Prometheus's text format.
//!
//! The hot path only bumps plain atomics: one per answered request (by API key), one add per
//! request and response frame for the bytes in and out. Error codes are counted from the typed
//! response each request is answered with (`ErrorCodes`): its top-level code and every
//! topic's, partition's or group's; a request answering several errors counts each. Those are
//! rare, so they sit in a mutex-guarded map. Everything else (partitions, groups, consumer lag)
//! is read from the broker when Prometheus scrapes, never kept up to date on the way.
//!
//! The text is encoded by the `prometheus-client` crate; the HTTP side is a minimal HTTP/1.0
//! responder on the server's own tokio runtime: every request gets the metrics page (Prometheus
//! sends `GET /metrics`), then the connection closes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Encodable;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::broker::{lock, lock_log, Broker};
use super::waits;
use crate::server::codes;
use crate::server::request::DecodeError;
use crate::server::LOG_TARGET;

/// Enough slots for every API key Kafka defines (they are below 100).
const API_KEYS: usize = 128;

/// The server's counters (one per broker).
pub struct Metrics {
    requests: Vec<AtomicU64>,
    errors: Mutex<BTreeMap<(i16, i16), u64>>,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
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

type Labels = Vec<(&'static str, String)>;

fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map(|k| format!("{k:?}")).unwrap_or_else(|_| key.to_string())
}

/// The page Prometheus scrapes: counters, then what the broker holds now.
pub fn encode(broker: &Broker) -> Result<String, std::fmt::Error> {
    let m = &broker.metrics;
    let mut registry = Registry::with_prefix("kafkalite");
    let requests = Family::<Labels, Counter>::default();
    for (key, n) in m.requests.iter().enumerate() {
        let n = n.load(Ordering::Relaxed);
        if n > 0 {
            requests.get_or_create(&vec![("api", api_name(key as i16))]).inc_by(n);
        }
    }
    registry.register("requests", "Requests answered, by API", requests);
    let errors = Family::<Labels, Counter>::default();
    for (&(key, code), &n) in lock(&m.errors).iter() {
        let labels = vec![("api", api_name(key)), ("error", codes::name(code).to_string()), ("code", code.to_string())];
        errors.get_or_create(&labels).inc_by(n);
    }
    registry.register("request_errors", "Error codes answered (each topic's, partition's or group's), by API", errors);
    let bytes_in = Counter::<u64>::default();
    bytes_in.inc_by(m.bytes_in.load(Ordering::Relaxed));
    registry.register("bytes_in", "Request bytes read from clients", bytes_in);
    let bytes_out = Counter::<u64>::default();
    bytes_out.inc_by(m.bytes_out.load(Ordering::Relaxed));
    registry.register("bytes_out", "Response bytes written to clients", bytes_out);

    let (topics, partitions) = (Gauge::<i64>::default(), Gauge::<i64>::default());
    if let Ok(all) = broker.topics() {
        topics.set(all.len() as i64);
        partitions.set(all.values().map(|t| t.partitions as i64).sum());
    }
    registry.register("topics", "Topics in the data directory", topics);
    registry.register("partitions", "Partitions of the topics in the data directory", partitions);
    let groups = Gauge::<i64>::default();
    let lag = Family::<Labels, Gauge>::default();
    if let Ok(names) = broker.offsets.groups(broker) {
        groups.set(names.len() as i64);
        for group in names {
            for ((topic, partition), (committed, _)) in broker.offsets.load(broker, &group).unwrap_or_default() {
                let end = match broker.partition(&topic, partition) {
                    Ok(Some(log)) => lock_log(&log).and_then(|mut l| l.follow().map(|_| l.end_offset())),
                    _ => continue,
                };
                if let Ok(end) = end {
                    let labels =
                        vec![("group", group.clone()), ("topic", topic.clone()), ("partition", partition.to_string())];
                    lag.get_or_create(&labels).set((end - committed).max(0));
                }
            }
        }
    }
    registry.register("groups", "Consumer groups with committed offsets", groups);
    registry.register("consumer_lag", "Log end offset minus the group's committed offset", lag);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// How long a scraper may take to send its request line.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Answer every HTTP connection with the metrics page until the server stops.
pub async fn serve(listener: TcpListener, broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        let (mut stream, peer) = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    ::log::warn!(target: LOG_TARGET, "metrics listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let broker = broker.clone();
        tokio::spawn(async move {
            // The request itself does not matter (one page); read its head so that the client
            // is not reset while still sending.
            let mut head = [0u8; 4096];
            let _ = tokio::time::timeout(READ_TIMEOUT, stream.read(&mut head)).await;
            // Reading the groups' offsets and the partitions' ends is file I/O (opens, reads):
            // off the workers, in one of the slots every request's blocking work shares, so
            // scrapers cannot take more threads than those.
            let page = waits::off_workers(&broker, waits::deadline(0), encode).await;
            let response = match page {
                Err(waits::NotDone::Busy) => {
                    ::log::warn!(target: LOG_TARGET, "metrics for {peer}: every slot for blocking work stayed busy");
                    "HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
                }
                Ok(Ok(body)) => format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
                _ => {
                    ::log::warn!(target: LOG_TARGET, "metrics for {peer}: encoding the page failed");
                    "HTTP/1.0 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
                }
            };
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
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
