//! `kafkalite serve --metrics HOST:PORT`'s page: the counters (`state::metrics`), then what the
//! broker holds now (partitions, groups, consumer lag, read when Prometheus scrapes), in
//! Prometheus's text format.
//!
//! The text is encoded by the `prometheus-client` crate; the HTTP side is a minimal HTTP/1.0
//! responder on the server's own tokio runtime: every request gets the metrics page (Prometheus
//! sends `GET /metrics`), then the connection closes.

use crate::server::codes;
use crate::server::log_target::LOG_TARGET;
use crate::server::state::broker::Broker;
use crate::server::state::locks::{lock, lock_log};
use crate::server::state::waits;
use kafka_protocol::messages::*;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

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
