//! Accepting clients and serving one connection: on a TLS listener the handshake first
//! (`tls.rs`), then frames are read, answered and written in order (Kafka's per-connection
//! ordering), one request at a time, each first admitted by the connection's SASL session
//! (`sasl.rs`), which also holds who the connection is (`Session::principal`). The one overlap:
//! Produce requests whose acks=all answers wait for a sync, while the next ones are read and
//! appended (their answers still written in order: `pipeline.rs`). A bad frame closes only its own connection;
//! every task's failure stays inside that task. A client that does not read a response within
//! `RESPONSE_WRITE_DEADLINE` (or connections.max.idle.ms) is closed, freeing the response and
//! its share of the response budget.
//!
//! Logged on `kafkalite.server.connection` (Kafka's `SocketServer` levels): connections opened
//! and closed at DEBUG, frames and requests that close a connection at WARNING with the peer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::admission::{Admission, Limits, Refused, Ticket};
use super::connection_rate::{ConnectionRate, DelayedClose};
use super::frame::{read_frame, FrameError, CHUNK, UNAUTHENTICATED_UNBUDGETED};
use super::pipeline::Answers;
use super::sasl::{Outcome, Session, AUTH_FAILURE_DELAY};
use super::tls;
use crate::server::config::ServerConfig;
use crate::server::dispatch::handle;
use crate::server::request::{decode_request, Answer, DecodeError};
use crate::server::security::principal::Principal;
use crate::server::state::broker::Broker;

/// The `log` target (Python: `logging.getLogger("kafkalite.server.connection")`).
const TARGET: &str = "kafkalite::server::connection";

/// Why a connection closes when it was evicted (`admission`).
const EVICTED: &str = "closed to make room: the listener is full (max.connections) and this connection \
                       had not authenticated";

/// The longest a response may take to be written (or `connections.max.idle.ms` if shorter): a
/// client that sends a Fetch and never reads its answer would otherwise keep the response, and
/// its share of the server-wide response budget (`frame::QUEUED_MAX_RESPONSE_BYTES`), for as
/// long as the socket lives.
/// Kafka's clients give up on a response after `request.timeout.ms` (30 s by default), so one
/// still unread by then is wanted by nobody.
const RESPONSE_WRITE_DEADLINE: Duration = Duration::from_secs(30);

/// Write one response within `deadline`; Err: why the connection closes.
async fn write_response<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    deadline: Duration,
    addr: &str,
) -> Result<(), String> {
    // The flush matters on TLS: `write_all` may leave the last records in rustls' buffer when
    // the socket is full, and they would wait there for the next response.
    let write = async {
        writer.write_all(bytes).await?;
        writer.flush().await
    };
    match tokio::time::timeout(deadline, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("writing a response failed: {e}")),
        Err(_) => {
            log::warn!(
                target: TARGET,
                "closing the connection from {addr}: it did not read a response of {} bytes within {} ms",
                bytes.len(),
                deadline.as_millis()
            );
            Err(format!("a response unread for {} ms", deadline.as_millis()))
        }
    }
}

/// Accept clients until the server stops; `tls`: the listener is SSL or SASL_SSL.
pub async fn accept_loop(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ServerConfig,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) {
    let admission = Admission::new(Limits {
        max_connections: config.max_connections,
        max_per_ip: config.max_connections_per_ip,
        overrides: config.max_connections_per_ip_overrides.clone(),
    });
    let rate = ConnectionRate::new(config.max_connection_creation_rate);
    let throttled = DelayedClose::start();
    let mut debug_level = DebugLevel { on: false, checked: None };
    let mut failing = false; // accept errors are said once per run of them, not every 50 ms
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                failing = false;
                accepted
            }
            Err(e) => {
                if !failing {
                    log::warn!(target: TARGET, "cannot accept connections ({e}); retrying as connections close");
                }
                failing = true;
                // EMFILE and friends: wait for connections to close instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Over max.connection.creation.rate: accept nothing else meanwhile (Kafka's acceptor).
        let wait = rate.accepted();
        if !wait.is_zero() {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        // Not logged: under a flood a line per connection would cost more than the connection.
        if let Some(throttle) = rate.ip_throttle(peer.ip(), broker.quotas.connection_rate(peer.ip())) {
            throttled.close_after(stream, throttle);
            continue;
        }
        let ticket = match admission.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(refused) => {
                let why = match refused {
                    Refused::PerIp(n) => {
                        format!("{n} connections from {} are open (max.connections.per.ip)", peer.ip())
                    }
                    Refused::Full(n) => format!("{n} authenticated connections are open (max.connections)"),
                };
                log::warn!(target: TARGET, "closed a connection from {peer} at once: {why}");
                drop(stream);
                continue;
            }
        };
        let (broker, stop, tls) = (broker.clone(), stop.clone(), tls.clone());
        let limits = Deadlines {
            idle: config.idle_timeout,
            authentication: config.sasl.then(|| Instant::now() + config.authentication_timeout),
        };
        let sasl = config.sasl;
        let debug = debug_level.on();
        tokio::spawn(async move {
            serve(stream, &broker, limits, sasl, tls, stop, &ticket, debug).await;
            drop(ticket);
        });
    }
}

/// How long a connection may wait: for its next request (`connections.max.idle.ms`), and, on a
/// SASL listener, to be authenticated (`--authentication-timeout-ms`, from its accept).
#[derive(Clone, Copy)]
struct Deadlines {
    idle: Duration,
    authentication: Option<Instant>,
}

impl Deadlines {
    /// How long the next read may take, and whether running out means the authentication
    /// deadline (true) or idleness.
    fn next_read(&self, authenticated: bool) -> (Duration, bool) {
        match self.authentication {
            Some(at) if !authenticated => {
                let left = at.saturating_duration_since(Instant::now());
                if left < self.idle {
                    (left, true)
                } else {
                    (self.idle, false)
                }
            }
            _ => (self.idle, false),
        }
    }
}

/// Write one request's answer (none for a Produce with acks=0); Err: why the connection closes.
async fn write_answer<W: AsyncWrite + Unpin>(
    answer: Result<Option<Bytes>, DecodeError>,
    writer: &mut W,
    broker: &Broker,
    deadline: Duration,
    addr: &str,
) -> Result<(), String> {
    match answer {
        Ok(Some(bytes)) => {
            broker.metrics.bytes_out(bytes.len());
            write_response(writer, &bytes, deadline, addr).await
        }
        Ok(None) => Ok(()),
        Err(e) => Err(request_failed(e, addr)),
    }
}

fn request_failed(e: DecodeError, addr: &str) -> String {
    log::warn!(target: TARGET, "closing the connection from {addr}: its request failed: {}", e.0);
    format!("request failed: {}", e.0)
}

/// Resolves when the peer closes while a request is being handled, so a long poll or a
/// group join of a client that went away is dropped. Pipelined bytes stay buffered in the
/// reader for the next frame; once some arrived, this just waits.
async fn closed_by_peer<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) {
    match reader.fill_buf().await {
        Ok([]) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// Serve one client until it closes, fails its TLS handshake (`tls`: the listener is SSL or
/// SASL_SSL), sends something we cannot answer, fails to authenticate (`sasl`: the listener is
/// SASL_PLAINTEXT or SASL_SSL) or to within its deadline, idles past `connections.max.idle.ms`,
/// is evicted to make room for another (`ticket`, while not authenticated), or the server stops.
/// `debug`: its open and close are logged (`DebugLevel`).
#[allow(clippy::too_many_arguments)] // one connection's parts, passed once
async fn serve(
    stream: TcpStream,
    broker: &Arc<Broker>,
    limits: Deadlines,
    sasl: bool,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
    ticket: &Ticket,
    debug: bool,
) {
    let idle = limits.idle;
    let _ = stream.set_nodelay(true);
    let addr = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "an unknown peer".into());
    // Kafka's DescribeGroups shows members' hosts as "/<ip>".
    let peer = stream.peer_addr().map(|a| format!("/{}", a.ip())).unwrap_or_default();
    if debug {
        log::debug!(target: TARGET, "connection from {addr} opened");
    }
    let why = match tls {
        None => {
            let session = Session::new(sasl, &peer, Principal::anonymous());
            let (reader, writer) = stream.into_split();
            serve_until_closed(reader, writer, session, broker, limits, &addr, &peer, stop, ticket).await
        }
        Some(acceptor) => {
            let mut until_stop = stop.clone();
            let shaken = tokio::select! {
                _ = until_stop.changed() => Err(Some("the server stops".to_string())),
                _ = ticket.evicted() => Err(Some(EVICTED.to_string())),
                shaken = tls::handshake(&acceptor, stream, idle.min(tls::HANDSHAKE_TIMEOUT)) => shaken,
            };
            match shaken {
                Ok((stream, principal)) => {
                    let principal = principal.unwrap_or_else(Principal::anonymous);
                    if !principal.is_anonymous() {
                        log::debug!(target: TARGET, "{addr} presented a client certificate: {principal}");
                    }
                    let session = Session::new(sasl, &peer, principal);
                    let (reader, writer) = tokio::io::split(stream);
                    serve_until_closed(reader, writer, session, broker, limits, &addr, &peer, stop, ticket).await
                }
                Err(None) => "closed by the client before a TLS handshake".into(),
                Err(Some(why)) => {
                    log::warn!(target: TARGET, "closing the connection from {addr}: {why}");
                    why
                }
            }
        }
    };
    if debug {
        log::debug!(target: TARGET, "connection from {addr} closed ({why})");
    }
}

/// Whether DEBUG is on for `TARGET`, asked of the logger at most once a second by each accept
/// loop. Each connection logs its open and close at DEBUG, and under Python the logger (pyo3-log,
/// levels not cached) takes the GIL to ask Python's logging for every line, enabled or not: twice
/// per connection, serialised across the runtime's threads, under a connection flood.
struct DebugLevel {
    on: bool,
    checked: Option<Instant>,
}

impl DebugLevel {
    fn on(&mut self) -> bool {
        if self.checked.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            self.checked = Some(Instant::now());
            self.on = log::log_enabled!(target: TARGET, log::Level::Debug);
        }
        self.on
    }
}

/// Serve one connection; returns why it ended (logged by `serve`). `addr`: the client's
/// address for log lines, `peer`: its host as Kafka shows it ("/<ip>").
#[allow(clippy::too_many_arguments)] // one connection's parts, passed once
async fn serve_until_closed<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    reader: R,
    mut writer: W,
    mut session: Session,
    broker: &Arc<Broker>,
    limits: Deadlines,
    addr: &str,
    peer: &str,
    mut stop: watch::Receiver<bool>,
    ticket: &Ticket,
) -> String {
    let idle = limits.idle;
    let mut authenticated = false;
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let write_deadline = idle.min(RESPONSE_WRITE_DEADLINE);
    // Produce answers waiting for their syncs (`pipeline`).
    let mut answers = Answers::default();
    loop {
        // Each answer is written once done, in order; the next request is read as soon as it
        // comes (a Produce is appended meanwhile and shares the sync), unless too many wait.
        while !answers.is_empty() {
            tokio::select! {
                biased; // a finished answer is written before the next request is read
                _ = stop.changed() => return "the server stops".into(),
                answer = answers.next() => {
                    if let Err(why) = write_answer(answer, &mut writer, broker, write_deadline, addr).await {
                        return why;
                    }
                }
                _ = reader.fill_buf(), if !answers.is_full() => break,
            }
        }
        if !authenticated && session.authenticated() {
            authenticated = true;
            ticket.authenticated();
        }
        let max = session.max_frame();
        let (budget, unbudgeted) = if authenticated {
            (&broker.request_budget, CHUNK)
        } else {
            (&broker.unauthenticated_budget, UNAUTHENTICATED_UNBUDGETED)
        };
        let (wait, for_authentication) = limits.next_read(authenticated);
        let frame = tokio::select! {
            _ = stop.changed() => return "the server stops".into(),
            _ = ticket.evicted(), if !authenticated => {
                log::warn!(target: TARGET, "closing the connection from {addr}: {EVICTED}");
                return EVICTED.into();
            }
            read = tokio::time::timeout(wait, read_frame(&mut reader, budget, max, unbudgeted)) => match read {
                Ok(Ok(frame)) => {
                    broker.metrics.bytes_in(4 + frame.bytes.len());
                    frame
                }
                Ok(Err(FrameError::Closed)) => return "closed by the client".into(),
                Ok(Err(FrameError::BadSize(size))) => {
                    log::warn!(
                        target: TARGET,
                        "closing the connection from {addr}: a request frame of {size} bytes (negative, or over \
                         socket.request.max.bytes)"
                    );
                    return format!("bad frame size {size}");
                }
                // A client closing with bytes unread (a TLS client that did not read the
                // server's session tickets) resets the connection: it went away, nothing was refused.
                Ok(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return "reset by the client".into()
                }
                Ok(Err(FrameError::Io(e))) => {
                    log::warn!(target: TARGET, "closing the connection from {addr}: reading a request failed: {e}");
                    return format!("read failed: {e}");
                }
                Err(_) if for_authentication => {
                    log::info!(target: TARGET, "closing the connection from {addr}: not authenticated in time");
                    return "not authenticated within --authentication-timeout-ms".into();
                }
                Err(_) => return format!("idle for more than connections.max.idle.ms ({} ms)", idle.as_millis()),
            },
        };
        let (outcome, request) = if session.expects_raw_token() {
            (session.raw_token(&frame.bytes, &broker.credentials), None)
        } else {
            // Kafka closes a connection whose request it cannot parse (InvalidRequestException).
            match decode_request(frame.bytes.clone()) {
                Ok(request) => (session.admit(&request, &broker.credentials), Some(request)),
                Err(e) => {
                    log::warn!(target: TARGET, "closing the connection from {addr}: cannot decode its request: {}", e.0);
                    return format!("undecodable request: {}", e.0);
                }
            }
        };
        // Anything but a Produce (and any reply of the SASL session) comes after every earlier
        // answer was written: only Produce requests overlap (`pipeline`).
        if !matches!((&outcome, &request), (Outcome::Serve, Some(r)) if r.key == ApiKey::Produce) {
            while !answers.is_empty() {
                let answer = tokio::select! {
                    _ = stop.changed() => return "the server stops".into(),
                    answer = answers.next() => answer,
                };
                if let Err(why) = write_answer(answer, &mut writer, broker, write_deadline, addr).await {
                    return why;
                }
            }
        }
        let request = match (outcome, request) {
            (Outcome::Serve, Some(request)) => request,
            (Outcome::Serve, None) => return "a bare SASL token outside an exchange".into(), // never served
            (Outcome::Reply(bytes), _) => {
                if let Err(why) = write_response(&mut writer, &bytes, write_deadline, addr).await {
                    return why;
                }
                continue;
            }
            (Outcome::ReplyAndClose(bytes), _) => {
                if write_response(&mut writer, &bytes, write_deadline, addr).await.is_ok() {
                    tokio::time::sleep(AUTH_FAILURE_DELAY).await;
                }
                return "authentication failed".into();
            }
            (Outcome::Close, _) => return "closed by its SASL session (a request before authentication)".into(),
        };
        let who = crate::server::security::authorizer::who(&session.principal().to_string(), peer);
        let response = tokio::select! {
            _ = stop.changed() => return "the server stops".into(),
            _ = closed_by_peer(&mut reader) => return "closed by the client while its request was served".into(),
            response = handle(broker, request, peer, &who) => response,
        };
        // The frame (and its share of the request budget) lives until its request is answered:
        // decoded bodies such as Produce records point into it.
        match response {
            Ok(Answer::Now(answer)) if answers.is_empty() => {
                if let Err(why) = write_answer(Ok(answer), &mut writer, broker, write_deadline, addr).await {
                    return why;
                }
                drop(frame);
            }
            // Only Produce answers wait, and every one is written before another API's request
            // is served, so this is written at once; were one waiting, it would go in its turn.
            Ok(Answer::Then(answer, after)) if !answers.is_empty() => {
                answers.push(Answer::Now(Some(answer)), frame);
                after();
            }
            Ok(Answer::Then(answer, after)) => {
                let written = write_answer(Ok(Some(answer)), &mut writer, broker, write_deadline, addr).await;
                after();
                if let Err(why) = written {
                    return why;
                }
                drop(frame);
            }
            // After answers still waiting (a Produce): in its turn.
            Ok(answer) => answers.push(answer, frame),
            Err(e) => return request_failed(e, addr),
        }
    }
}
