//! `kafkalite serve`: Kafka's wire protocol over TCP on top of the engine, so any Kafka
//! client (librdkafka, kafka-python, Java, ...) can produce to and fetch from a data
//! directory while the embedded Python API uses the same files.
//!
//! Folders by role, each importing only those below it (tests/project/test_layer_picture.py checks):
//! `network` (listeners, TLS, SASL, connections, frames) reaches the handlers through `dispatch`
//! (routing a decoded request to its handler, the authorization check first) over `request` (a
//! request's header and body, a framed answer, the API table); `handlers` (one file per Kafka API
//! or family) over `state` (what handlers share: the broker, the coordinators, waits, quotas,
//! pending transaction ends) over `security` (principals, SCRAM credentials, the ACL model).
//! Beside them: `config` (the settings), `codes` (engine errors as Kafka error codes, and a
//! refused request logged at WARNING with the client's address and the reason: `codes::refused`),
//! `log_target`. This file starts a server.
//!
//! The runtime has two request workers, so no request may hold one while it waits for a lock
//! another process or request holds (`waits`): a partition's append lock and log, a group's state
//! lock are tried without blocking and retried with backoff, blocking handlers run off the
//! workers in a bounded number of slots, and every such wait ends at `waits::LOCK_WAIT` (5 s)
//! with the API's retriable error and a WARNING naming the holder. No server-wide lock (the
//! partitions map, the groups, the claiming lock) is held across such a wait.
//! Request and response bodies are encoded by the `kafka-protocol` crate, generated from
//! Kafka's JSON schemas; nothing here hand-writes a message codec.
//!
//! Logging goes through the `log` crate under targets `kafkalite::server...`, which the Python
//! binding forwards to `logging.getLogger("kafkalite.server...")`: the start at INFO here,
//! connections in `network::connection`, group joins, rebalances and evictions in `state::group`.

mod codes;
mod config;
mod dispatch;
mod handlers;
mod log_target;
mod network;
mod request;
mod security;
mod state;

pub use network::frame;
use network::{admission, connection, listen, tls};
use security::authorizer;
use state::{broker, open_logs, topic_creation, waits};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::storage::error::{Error, Result};
pub use admission::parse_overrides as parse_connection_overrides;
pub use authorizer::Mode as AuthorizerMode;
pub use broker::Broker;
pub use config::{AcksAll, ServerConfig, DEFAULT_AUTHENTICATION_TIMEOUT, DEFAULT_MAX_CONNECTIONS};
pub use log_target::LOG_TARGET;
pub use request::{decode_request, SUPPORTED as SUPPORTED_APIS};
pub use state::fetch_limits::{FETCH_MAX_BYTES, FETCH_MAX_BYTES_MIN};
pub use tls::TlsFiles;

/// A running server: its own tokio runtime on background threads.
pub struct Server {
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: watch::Sender<bool>,
    broker: Arc<Broker>,
    local_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    security: listen::Security,
    /// RLIMIT_NOFILE after the start raised it (None: unlimited), and the partitions kept open.
    descriptors: (Option<u64>, usize),
}

impl Server {
    /// Bind, then serve on background threads until `stop` (or drop).
    pub fn start(config: ServerConfig) -> Result<Server> {
        if config.max_open_partitions == Some(0) {
            return Err(Error::config("max_open_partitions must be at least 1"));
        }
        if config.max_connections == 0 || config.authentication_timeout.is_zero() {
            return Err(Error::config("max.connections and the authentication timeout must be at least 1"));
        }
        if config.max_connections_per_ip == 0 && config.max_connections_per_ip_overrides.is_empty() {
            // As Kafka's KafkaConfig: 0 with no overrides would refuse every client.
            return Err(Error::config(
                "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides is set",
            ));
        }
        if config.max_connection_creation_rate == Some(0) {
            // As Kafka's validation of the listener's rate.
            return Err(Error::config(
                "Invalid max.connection.creation.rate 0: it must be at least 1 (unset: unlimited)",
            ));
        }
        if config.fetch_max_bytes < FETCH_MAX_BYTES_MIN {
            return Err(Error::config(format!(
                "fetch.max.bytes must be at least {FETCH_MAX_BYTES_MIN}, not {}",
                config.fetch_max_bytes
            )));
        }
        if let Some(rate) = config.controller_mutation_rate {
            topic_creation::check_rate(rate)?;
        }
        let (addr, loopback) = listen::resolve(&config.listen)?;
        let mut config = config;
        let asked = listen::Asked {
            sasl: config.sasl,
            tls: config.tls.is_some(),
            client_certs: config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
            allow_plaintext: config.allow_plaintext,
        };
        let security =
            listen::security(&config.listen, loopback, asked, || crate::coordination::users::any(&config.data_dir))?;
        config.sasl = security.sasl;
        let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
        listen::check_advertised(&config.listen, addr, config.advertised.as_deref())?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kafkalite-server")
            .enable_all()
            .build()
            .map_err(|e| Error::io("cannot start the server's threads", e))?;
        let listener =
            runtime.block_on(TcpListener::bind(addr)).map_err(|e| Error::io(format!("cannot listen on {addr}"), e))?;
        let local_addr = listener.local_addr().map_err(|e| Error::io("cannot read the bound address", e))?;
        let metrics_listener = match &config.metrics {
            Some(at) => {
                let addr = listen::metrics(at, config.metrics_allow_remote)?;
                let l = runtime
                    .block_on(TcpListener::bind(addr))
                    .map_err(|e| Error::io(format!("cannot listen for metrics on {addr}"), e))?;
                Some(l)
            }
            None => None,
        };
        let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
        let advertised = match &config.advertised {
            Some(a) => listen::parse_host_port(a)?,
            None => (local_addr.ip().to_string(), local_addr.port() as i32),
        };
        let (open_file_limit, max_open) = descriptors(config.max_open_partitions);
        open_logs::check_descriptor_limit(open_file_limit)?;
        config.max_open_partitions = Some(max_open);
        let fit = open_logs::connections_fit(open_file_limit, max_open);
        // The default is held to what the descriptors leave, so eviction comes before EMFILE; a
        // figure the operator chose is theirs, said at INFO.
        if config.max_connections == DEFAULT_MAX_CONNECTIONS && config.max_connections > fit {
            ::log::debug!(
                target: LOG_TARGET,
                "at most {fit} connections (the default max.connections {DEFAULT_MAX_CONNECTIONS} is more than the \
                 open-file limit leaves beside {max_open} open partitions; raise `ulimit -n` for more)"
            );
            config.max_connections = fit;
        } else if config.max_connections > fit {
            ::log::info!(
                target: LOG_TARGET,
                "max.connections {} is more than the open-file limit leaves ({fit} beside {max_open} open \
                 partitions): past that, opens may find no descriptor; raise `ulimit -n`",
                config.max_connections
            );
        }
        let broker = Arc::new(Broker::open(&config, advertised)?);
        // Before any request: a served transactional Produce is answered before its sync
        // (`durable`), so transactions open when the machine went down are aborted here.
        broker.transactions.abort_open_after_reboot(crate::storage::log::now_ms())?;
        let (shutdown, stop_rx) = watch::channel(false);
        runtime.spawn(expire_sessions(broker.clone(), stop_rx.clone()));
        runtime.spawn(release_resident_pages(broker.clone(), stop_rx.clone()));
        runtime.spawn(settle_transactions(broker.clone(), stop_rx.clone()));
        if let Some(l) = metrics_listener {
            runtime.spawn(network::metrics_page::serve(l, broker.clone(), stop_rx.clone()));
        }
        runtime.spawn(connection::accept_loop(listener, broker.clone(), config.clone(), tls, stop_rx));
        // Where it listens is said once, by the caller (`kafkalite serve` prints it whatever the
        // log level; `kafkalite.Server` has `address` and `bootstrap_servers`), not logged here too.
        Ok(Server {
            runtime: Some(runtime),
            shutdown,
            broker,
            local_addr,
            metrics_addr,
            security,
            descriptors: (open_file_limit, max_open),
        })
    }

    /// The address the listener is bound to (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the Prometheus endpoint, if one was asked for (port 0 resolved).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The process's open-file limit (RLIMIT_NOFILE, raised to its hard limit at start; None:
    /// unlimited) and the most partitions kept open while no request uses them.
    pub fn descriptors(&self) -> (Option<u64>, usize) {
        self.descriptors
    }

    /// Kafka's name for the listener's security protocol: PLAINTEXT, SASL_PLAINTEXT, SSL or
    /// SASL_SSL.
    pub fn security_protocol(&self) -> &'static str {
        self.security.protocol()
    }

    /// HOST:PORT as clients are told in Metadata.
    pub fn advertised(&self) -> String {
        let (host, port) = self.broker.advertised();
        format!("{host}:{port}")
    }

    /// Stop accepting, close every connection and the open partitions; bounded by `timeout`.
    pub fn stop(&mut self, timeout: Duration) {
        let _ = self.shutdown.send(true);
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(timeout);
        }
        self.broker.close();
    }
}

/// Raise RLIMIT_NOFILE to its hard limit; returns it (None: unlimited) with the partitions kept
/// open: `max_open`, or by default a share of the limit. Logged at DEBUG: `kafkalite serve` says
/// both in its one start line (`Server::descriptors`).
fn descriptors(max_open: Option<usize>) -> (Option<u64>, usize) {
    let (limit, failed) = open_logs::raise_descriptor_limit();
    if let Some(why) = failed {
        ::log::warn!(target: LOG_TARGET, "cannot raise the open-file limit (RLIMIT_NOFILE) to its hard limit: {why}");
    }
    let max_open = max_open.unwrap_or_else(|| limit.map_or(usize::MAX, open_logs::default_max_open));
    let said = limit.map_or("unlimited".to_string(), |l| l.to_string());
    ::log::debug!(
        target: LOG_TARGET,
        "open-file limit (RLIMIT_NOFILE) {said}: at most {max_open} partitions kept open when no request uses them"
    );
    (limit, max_open)
}

/// Kafka's session expiry for network group members, checked a few times a second.
async fn expire_sessions(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {
                broker.groups.expire();
                broker.consumer_groups.expire();
            }
        }
    }
}

/// How often the pages of the open partitions leave the server's resident set.
const RELEASE_RESIDENT_EVERY: Duration = Duration::from_millis(250);

/// Keeps the server's resident memory from growing with the partitions it has served: every
/// writer keeps a window around its write position faulted in (2-6 MiB, `RESIDENT_WINDOW` in
/// segment/writer.rs), and fetches fault in what they read, so dozens of open partitions would
/// hold over a hundred MB resident. Dropping the pages four times a second costs active
/// partitions a few minor faults (the page cache still has the bytes).
async fn release_resident_pages(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(RELEASE_RESIDENT_EVERY) => broker.release_resident_pages(),
        }
    }
}

/// Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms` default.
const SETTLE_TRANSACTIONS_EVERY: Duration = Duration::from_secs(10);

/// `transaction.timeout.ms` enforcement, as a Kafka broker's coordinator does it: at start and
/// then every `SETTLE_TRANSACTIONS_EVERY`, every transaction open longer than its timeout is
/// aborted (its producer fenced) and every one a crash left half-ended (PrepareCommit /
/// PrepareAbort) is completed, by whichever process gets there first (ids whose lock another
/// process holds are left to it). Runs off the request workers; a failure or a panic is logged
/// and the next round tries again.
async fn settle_transactions(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    loop {
        let round = waits::off_workers(&broker, waits::deadline(0), |b| {
            b.transactions.abort_expired_and_complete_pending(crate::storage::log::now_ms())
        });
        match round.await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => ::log::info!(
                target: LOG_TARGET,
                "transactions: aborted or completed {n} (past transaction.timeout.ms, or left half-ended by a crash)"
            ),
            Ok(Err(e)) => {
                ::log::warn!(target: LOG_TARGET, "transactions: expiring and completing failed: {e}; retried in 10 s")
            }
            Err(waits::NotDone::Busy) => {
                ::log::warn!(target: LOG_TARGET, "transactions: no slot for blocking work came free; retried in 10 s")
            }
            Err(waits::NotDone::Panicked) => {
                ::log::error!(target: LOG_TARGET, "transactions: expiring and completing panicked (a bug); retried in 10 s")
            }
            // A start followed at once by a stop: the round had not begun.
            Err(waits::NotDone::Stopped) => return,
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(SETTLE_TRANSACTIONS_EVERY) => {}
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}
