//! How a server is started: `kafkalite serve`'s settings, named after Kafka's broker settings,
//! with Kafka's defaults where kafkalite has the setting.
//! Its own module so that every part of the server can read the settings without importing the
//! server's start (`mod.rs`), which imports every part.

use std::path::PathBuf;
use std::time::Duration;

use crate::server::network::tls::TlsFiles;
use crate::server::security::authorizer::Mode as AuthorizerMode;
use crate::server::state::fetch_limits::FETCH_MAX_BYTES;
use crate::server::state::kip848_coordinator;
use crate::storage::error::{Error, Result};

/// `--authentication-timeout-ms`'s default: a client authenticates in milliseconds (a SCRAM
/// exchange at 16,384 iterations included), so ten seconds only waits for a slow network.
pub const DEFAULT_AUTHENTICATION_TIMEOUT: Duration = Duration::from_secs(10);

/// How a server is started (Kafka's broker setting names in the comments).
/// Kafka's `max.connections` here (Kafka's own default is unlimited).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    /// `listeners`: HOST:PORT; anything but loopback needs TLS and authentication (`listen.rs`).
    pub listen: String,
    /// SASL/SCRAM on a loopback listener too; always on for other addresses unless client
    /// certificates are required.
    pub sasl: bool,
    /// TLS (`ssl.keystore.*`, `ssl.client.auth=required` with a client CA); None: no TLS.
    pub tls: Option<TlsFiles>,
    /// Listen beyond loopback without TLS (SASL_PLAINTEXT), with a WARNING.
    pub allow_plaintext: bool,
    /// `advertised.listeners`: HOST:PORT clients are told to connect to (default: the bound address).
    pub advertised: Option<String>,
    /// `auto.create.topics.enable` (Kafka's default: true).
    pub auto_create_topics: bool,
    /// `num.partitions` for auto-created topics (Kafka's default: 1).
    pub default_partitions: i32,
    /// `connections.max.idle.ms` (Kafka's default: 10 minutes).
    pub idle_timeout: Duration,
    /// `max.connections`: when this many are open, the oldest that has not authenticated is
    /// closed to make room, or (all authenticated) the new one is closed at once (`admission`).
    /// The default is held to what the open-file limit leaves (`Server::start`).
    pub max_connections: usize,
    /// `max.connections.per.ip` (Kafka's default: unlimited), and its per-address overrides.
    pub max_connections_per_ip: usize,
    pub max_connections_per_ip_overrides: std::collections::HashMap<std::net::IpAddr, usize>,
    /// `max.connection.creation.rate`: connections accepted per second, over which the acceptor
    /// waits (`network::connection_rate`); None: unlimited (Kafka's default). The per-address rate
    /// is the ip entities' `connection_creation_rate` quota.
    pub max_connection_creation_rate: Option<u32>,
    /// With SASL: a connection not authenticated this long after it was accepted is closed,
    /// whatever it sent meanwhile (ApiVersions does not extend it).
    pub authentication_timeout: Duration,
    /// `fetch.max.bytes`: the most record bytes of one Fetch response (Kafka's default: 55 MiB;
    /// at least 1024).
    pub fetch_max_bytes: i32,
    /// When Produce's acks=all is answered: on disk (default, as the embedded `acks='all'`) or in
    /// the page cache (Kafka's broker).
    pub acks_all: AcksAll,
    /// HOST:PORT of the Prometheus text endpoint (`kafkalite serve --metrics`); None: no endpoint.
    pub metrics: Option<String>,
    /// Serve the metrics endpoint beyond loopback (`--metrics-allow-remote`), with a WARNING.
    pub metrics_allow_remote: bool,
    /// The most partition logs kept open that no request is using (`--max-open-partitions`);
    /// None: a share of RLIMIT_NOFILE (`open_logs::default_max_open`), after `start` raised it.
    pub max_open_partitions: Option<usize>,
    /// When the ACLs are enforced (`--authorizer`: always; by default off on loopback, and on
    /// elsewhere once any ACL exists).
    pub authorizer: AuthorizerMode,
    /// `super.users`: principals (`User:alice`) the ACLs never restrict.
    pub super_users: Vec<String>,
    /// `group.consumer.session.timeout.ms` of consumer-protocol groups (Kafka's default: 45 s).
    pub consumer_session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms` (Kafka's default: 5 s).
    pub consumer_heartbeat_interval: Duration,
    /// Kafka's `controller_mutation_rate` quota: partitions created per second over the network,
    /// for all clients together (`--controller-mutation-rate`); None: unlimited, Kafka's default.
    pub controller_mutation_rate: Option<f64>,
}

impl ServerConfig {
    pub fn new(data_dir: impl Into<PathBuf>, listen: impl Into<String>) -> ServerConfig {
        ServerConfig {
            data_dir: data_dir.into(),
            listen: listen.into(),
            sasl: false,
            tls: None,
            allow_plaintext: false,
            advertised: None,
            auto_create_topics: true,
            default_partitions: 1,
            idle_timeout: Duration::from_secs(600),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: usize::MAX,
            max_connections_per_ip_overrides: Default::default(),
            max_connection_creation_rate: None,
            authentication_timeout: DEFAULT_AUTHENTICATION_TIMEOUT,
            fetch_max_bytes: FETCH_MAX_BYTES,
            acks_all: AcksAll::Disk,
            metrics: None,
            metrics_allow_remote: false,
            max_open_partitions: None,
            authorizer: AuthorizerMode::Auto,
            super_users: Vec::new(),
            consumer_session_timeout: kip848_coordinator::DEFAULT_SESSION_TIMEOUT,
            consumer_heartbeat_interval: kip848_coordinator::DEFAULT_HEARTBEAT_INTERVAL,
            controller_mutation_rate: None,
        }
    }
}

/// `--acks-all`: when a Produce with acks=all (-1) is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcksAll {
    /// Once the batches are in the page cache (Kafka's broker, `flush.messages` unset).
    PageCache,
    /// Once a sync covering the batches returned (the embedded `acks='all'`).
    Disk,
}

impl AcksAll {
    /// The CLI's and `kafkalite.Server`'s spelling: `page-cache` or `disk`.
    pub fn parse(s: &str) -> Result<AcksAll> {
        match s {
            "page-cache" => Ok(AcksAll::PageCache),
            "disk" => Ok(AcksAll::Disk),
            other => Err(Error::config(format!("acks_all must be 'disk' or 'page-cache', not {other:?}"))),
        }
    }
}
