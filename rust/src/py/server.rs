//! `kafkalite._native.NativeServer`: starts and stops the wire-protocol server (its tokio
//! runtime runs on its own threads; nothing here holds the GIL while it serves).

use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;

use crate::server::{AcksAll, AuthorizerMode, Server, ServerConfig, TlsFiles, FETCH_MAX_BYTES};

#[pyclass(frozen, module = "kafkalite._native")]
pub struct NativeServer {
    inner: Mutex<Option<Server>>,
    local_addr: String,
    advertised: String,
    security_protocol: &'static str,
    metrics_addr: Option<String>,
    descriptors: (Option<u64>, usize),
}

#[pymethods]
impl NativeServer {
    #[new]
    #[pyo3(signature = (
        data_dir, listen, advertised=None, auto_create_topics=true, idle_timeout_ms=600_000, sasl=false,
        fetch_max_bytes=FETCH_MAX_BYTES, acks_all="disk", metrics=None, metrics_allow_remote=false, max_open_partitions=None,
        authorizer=false, super_users=Vec::new(), tls_cert=None, tls_key=None, tls_client_ca=None, allow_plaintext=false,
        group_consumer_session_timeout_ms=45_000, group_consumer_heartbeat_interval_ms=5_000,
        controller_mutation_rate=None,
        max_connections=10_000, max_connections_per_ip=None, max_connections_per_ip_overrides=None,
        max_connection_creation_rate=None,
        authentication_timeout_ms=10_000,
    ))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn new(
        py: Python<'_>,
        data_dir: std::path::PathBuf,
        listen: String,
        advertised: Option<String>,
        auto_create_topics: bool,
        idle_timeout_ms: u64,
        sasl: bool,
        fetch_max_bytes: i32,
        acks_all: &str,
        metrics: Option<String>,
        metrics_allow_remote: bool,
        max_open_partitions: Option<usize>,
        authorizer: bool,
        super_users: Vec<String>,
        tls_cert: Option<std::path::PathBuf>,
        tls_key: Option<std::path::PathBuf>,
        tls_client_ca: Option<std::path::PathBuf>,
        allow_plaintext: bool,
        group_consumer_session_timeout_ms: u64,
        group_consumer_heartbeat_interval_ms: u64,
        controller_mutation_rate: Option<f64>,
        max_connections: usize,
        max_connections_per_ip: Option<usize>,
        max_connections_per_ip_overrides: Option<String>,
        max_connection_creation_rate: Option<u32>,
        authentication_timeout_ms: u64,
    ) -> PyResult<Self> {
        let tls = match (tls_cert, tls_key, tls_client_ca) {
            (None, None, None) => None,
            (Some(cert), Some(key), client_ca) => Some(TlsFiles { cert, key, client_ca }),
            _ => {
                return Err(crate::storage::error::Error::config(
                    "TLS needs both a certificate and its key (tls_cert and tls_key; --tls-cert and --tls-key)",
                )
                .into())
            }
        };
        let mut config = ServerConfig::new(data_dir, listen);
        config.fetch_max_bytes = fetch_max_bytes;
        config.acks_all = AcksAll::parse(acks_all)?;
        config.advertised = advertised;
        config.auto_create_topics = auto_create_topics;
        config.idle_timeout = Duration::from_millis(idle_timeout_ms);
        config.sasl = sasl;
        config.metrics = metrics;
        config.metrics_allow_remote = metrics_allow_remote;
        config.max_open_partitions = max_open_partitions;
        config.authorizer = if authorizer { AuthorizerMode::On } else { AuthorizerMode::Auto };
        config.super_users = super_users;
        config.tls = tls;
        config.allow_plaintext = allow_plaintext;
        config.consumer_session_timeout = Duration::from_millis(group_consumer_session_timeout_ms);
        config.consumer_heartbeat_interval = Duration::from_millis(group_consumer_heartbeat_interval_ms);
        config.controller_mutation_rate = controller_mutation_rate;
        config.max_connections = max_connections;
        config.max_connections_per_ip = max_connections_per_ip.unwrap_or(usize::MAX);
        if let Some(spec) = max_connections_per_ip_overrides {
            config.max_connections_per_ip_overrides = crate::server::parse_connection_overrides(&spec)?;
        }
        config.max_connection_creation_rate = max_connection_creation_rate;
        config.authentication_timeout = Duration::from_millis(authentication_timeout_ms);
        let server = py.detach(|| Server::start(config))?;
        let local_addr = server.local_addr().to_string();
        let advertised = server.advertised();
        let security_protocol = server.security_protocol();
        let metrics_addr = server.metrics_addr().map(|a| a.to_string());
        let descriptors = server.descriptors();
        Ok(NativeServer {
            inner: Mutex::new(Some(server)),
            local_addr,
            advertised,
            security_protocol,
            metrics_addr,
            descriptors,
        })
    }

    #[getter]
    fn local_addr(&self) -> String {
        self.local_addr.clone()
    }

    #[getter]
    fn advertised(&self) -> String {
        self.advertised.clone()
    }

    /// The process's open-file limit (RLIMIT_NOFILE, raised to its hard limit at start), None
    /// if unlimited.
    #[getter]
    fn open_file_limit(&self) -> Option<u64> {
        self.descriptors.0
    }

    /// The most partitions kept open while no request uses them.
    #[getter]
    fn max_open_partitions(&self) -> usize {
        self.descriptors.1
    }

    /// HOST:PORT of the Prometheus endpoint, or None.
    #[getter]
    fn metrics_addr(&self) -> Option<String> {
        self.metrics_addr.clone()
    }

    /// PLAINTEXT, SASL_PLAINTEXT, SSL or SASL_SSL.
    #[getter]
    fn security_protocol(&self) -> &'static str {
        self.security_protocol
    }

    /// Stop serving and close the partitions; waits at most `timeout_ms` for connections.
    fn stop(&self, py: Python<'_>, timeout_ms: u64) {
        self.stop_detached(py, timeout_ms);
    }
}

impl NativeServer {
    /// The server's threads log through Python (pyo3-log takes the GIL), so it is stopped with
    /// the GIL released: otherwise a connection logging its close would wait for the GIL this
    /// thread holds while this thread waits for that connection.
    fn stop_detached(&self, py: Python<'_>, timeout_ms: u64) {
        // Recovering a poisoned lock is safe here: the only thing ever done under it is this
        // `Option::take`, which cannot panic part way; stopping must work whatever happened.
        let server = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut server) = server {
            py.detach(move || server.stop(Duration::from_millis(timeout_ms)));
        }
    }
}

impl Drop for NativeServer {
    /// Garbage-collected without `stop()`: stopped the same way (GIL released). At interpreter
    /// shutdown (no attaching then) the `Server` field's own drop stops it.
    fn drop(&mut self) {
        if self.inner.get_mut().map(|s| s.is_some()).unwrap_or(true) {
            let _ = Python::try_attach(|py| self.stop_detached(py, 5_000));
        }
    }
}
