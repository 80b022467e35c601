//! SASL on one connection, as Kafka's `SaslServerAuthenticator` runs a SASL_PLAINTEXT or
//! SASL_SSL listener: before authentication a client may send ApiVersions, then SaslHandshake
//! (v0-1) naming a mechanism, then the SCRAM messages, in SaslAuthenticate requests (after handshake v1) or as
//! bare size-prefixed tokens (after handshake v0, Kafka's original framing). Any other request
//! before authentication closes the connection unanswered, as Kafka does; a failed
//! authentication is answered (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
//! ILLEGAL_SASL_STATE) and the connection closed after `AUTH_FAILURE_DELAY`.
//!
//! On a listener without SASL (loopback PLAINTEXT) and after authentication, SaslHandshake and
//! SaslAuthenticate get ILLEGAL_SASL_STATE, as Kafka's `KafkaApis` answers them.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;

use super::frame::MAX_REQUEST_BYTES;
use crate::coordination::users::Mechanism;
use crate::server::codes;
use crate::server::log_target::LOG_TARGET;
use crate::server::request::{frame, Body, Request};
use crate::server::security::credentials::Credentials;
use crate::server::security::principal::Principal;
use crate::server::security::scram::{ScramServer, Step};

/// Kafka's `sasl.server.max.receive.size`: the largest frame read before authentication.
pub const MAX_UNAUTHENTICATED_FRAME: i32 = 512 * 1024;
/// Kafka's `connection.failed.authentication.delay.ms` default: a failed client waits this long
/// before its connection closes, which slows down password guessing.
pub const AUTH_FAILURE_DELAY: Duration = Duration::from_millis(100);

/// What the connection does with a frame.
#[derive(Debug)]
pub enum Outcome {
    /// Not a SASL matter, and allowed now: serve it.
    Serve,
    /// Send these bytes and read on.
    Reply(Bytes),
    /// Send these bytes, wait `AUTH_FAILURE_DELAY`, close.
    ReplyAndClose(Bytes),
    /// Close without an answer.
    Close,
}

enum State {
    /// Before SaslHandshake.
    Handshake,
    /// After SaslHandshake v1: SCRAM messages come in SaslAuthenticate requests.
    Authenticate(ScramServer),
    /// After SaslHandshake v0: SCRAM messages come as bare tokens.
    RawTokens(ScramServer),
    Authenticated,
}

/// One connection's SASL state, and who the connection is.
pub struct Session {
    required: bool,
    state: State,
    peer: String,
    principal: Principal,
}

fn mechanism_names() -> Vec<StrBytes> {
    Mechanism::ALL.iter().map(|m| StrBytes::from_static_str(m.name())).collect()
}

impl Session {
    /// `required`: the listener is SASL_PLAINTEXT or SASL_SSL (non-loopback, or `--sasl`);
    /// `principal`: who the connection is before SASL (ANONYMOUS, or the subject of its TLS
    /// client certificate).
    pub fn new(required: bool, peer: &str, principal: Principal) -> Session {
        Session { required, state: State::Handshake, peer: peer.to_string(), principal }
    }

    /// The connection's principal (Kafka's `KafkaPrincipal`): what authorization checks.
    pub(crate) fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Authenticated, or on a listener that does not ask for it.
    pub fn authenticated(&self) -> bool {
        !self.required || matches!(self.state, State::Authenticated)
    }

    /// The largest frame to read next: small until the client has authenticated.
    pub fn max_frame(&self) -> i32 {
        if self.authenticated() {
            MAX_REQUEST_BYTES
        } else {
            MAX_UNAUTHENTICATED_FRAME
        }
    }

    /// True when the next frame is a bare SCRAM token (after SaslHandshake v0), not a request.
    pub fn expects_raw_token(&self) -> bool {
        matches!(self.state, State::RawTokens(_))
    }

    /// A bare token after SaslHandshake v0: answered with a bare size-prefixed token; a failure
    /// closes the connection (the v0 framing has no way to carry an error).
    pub fn raw_token(&mut self, token: &[u8], users: &Credentials) -> Outcome {
        let State::RawTokens(scram) = &mut self.state else { return Outcome::Close };
        match step(scram, token, users, &self.peer) {
            Ok((reply, done)) => {
                if let Some(user) = done {
                    self.authenticated_as(user);
                }
                let mut out = BytesMut::with_capacity(4 + reply.len());
                out.put_i32(reply.len() as i32);
                out.put_slice(&reply);
                Outcome::Reply(out.freeze())
            }
            Err(_) => Outcome::Close,
        }
    }

    /// SCRAM succeeded: the connection is the user now, whatever its certificate said (Kafka's
    /// SASL_SSL principal is the SASL one).
    fn authenticated_as(&mut self, user: String) {
        self.state = State::Authenticated;
        self.principal = Principal::user(user);
    }

    /// Decide what happens to a decoded request.
    pub fn admit(&mut self, request: &Request, users: &Credentials) -> Outcome {
        let v = request.header.request_api_version;
        let id = request.header.correlation_id;
        match &request.body {
            Body::SaslHandshake(r) => {
                let (outcome, code) = self.handshake(r.mechanism.as_str(), v);
                let body = SaslHandshakeResponse::default().with_error_code(code).with_mechanisms(mechanism_names());
                encode(ApiKey::SaslHandshake, v, id, &body, outcome)
            }
            Body::SaslAuthenticate(r) => {
                let (outcome, code, message, bytes) = self.authenticate(&r.auth_bytes, users);
                let body = SaslAuthenticateResponse::default()
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string))
                    .with_auth_bytes(bytes)
                    .with_session_lifetime_ms(0); // no re-authentication (connections.max.reauth.ms = 0)
                encode(ApiKey::SaslAuthenticate, v, id, &body, outcome)
            }
            _ if self.authenticated() => Outcome::Serve,
            _ if request.key == ApiKey::ApiVersions && matches!(self.state, State::Handshake) => Outcome::Serve,
            _ => {
                ::log::info!(
                    target: LOG_TARGET,
                    "closed the connection from {}: {:?} request before SASL authentication",
                    self.peer,
                    request.key
                );
                Outcome::Close
            }
        }
    }

    /// SaslHandshake: whether the connection goes on, and the error code.
    fn handshake(&mut self, name: &str, version: i16) -> (Kind, i16) {
        if self.authenticated() {
            return (Kind::Reply, codes::ILLEGAL_SASL_STATE);
        }
        if !matches!(self.state, State::Handshake) {
            return (Kind::Close, codes::ILLEGAL_SASL_STATE);
        }
        let Some(mechanism) = Mechanism::from_name(name) else {
            ::log::info!(target: LOG_TARGET, "{} asked for the SASL mechanism {name:?}, which is not enabled", self.peer);
            return (Kind::Close, codes::UNSUPPORTED_SASL_MECHANISM);
        };
        let scram = ScramServer::new(mechanism);
        self.state = if version == 0 { State::RawTokens(scram) } else { State::Authenticate(scram) };
        (Kind::Reply, codes::NONE)
    }

    /// SaslAuthenticate: the outcome, error code, error message and the server's SCRAM message.
    fn authenticate(&mut self, token: &[u8], users: &Credentials) -> (Kind, i16, Option<String>, Bytes) {
        let scram = match &mut self.state {
            State::Authenticate(scram) if self.required => scram,
            State::Handshake if self.required => {
                let why = "SaslAuthenticate before SaslHandshake: send SaslHandshake first";
                return (Kind::Close, codes::ILLEGAL_SASL_STATE, Some(why.into()), Bytes::new());
            }
            _ => {
                let why = "SaslAuthenticate request received on a connection that needs no authentication now";
                return (Kind::Reply, codes::ILLEGAL_SASL_STATE, Some(why.into()), Bytes::new());
            }
        };
        match step(scram, token, users, &self.peer) {
            Ok((reply, done)) => {
                if let Some(user) = done {
                    self.authenticated_as(user);
                }
                (Kind::Reply, codes::NONE, None, Bytes::from(reply))
            }
            Err(message) => (Kind::Close, codes::SASL_AUTHENTICATION_FAILED, Some(message), Bytes::new()),
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Reply,
    Close,
}

fn encode<T: kafka_protocol::protocol::Encodable>(key: ApiKey, v: i16, id: i32, body: &T, kind: Kind) -> Outcome {
    match (frame(key, v, id, body), kind) {
        (Ok(bytes), Kind::Reply) => Outcome::Reply(bytes),
        (Ok(bytes), Kind::Close) => Outcome::ReplyAndClose(bytes),
        (Err(_), _) => Outcome::Close,
    }
}

/// One SCRAM step with the data directory's users: the server's message and, once the client
/// is authenticated, its user name; or the message for the client.
fn step(
    scram: &mut ScramServer,
    token: &[u8],
    users: &Credentials,
    peer: &str,
) -> Result<(Vec<u8>, Option<String>), String> {
    let mechanism = scram.mechanism();
    let lookup = |user: &str| {
        users.lookup(user, mechanism).map_err(|e| {
            ::log::error!(target: LOG_TARGET, "cannot check SASL credentials: {e}");
            "the server cannot read its users file".to_string()
        })
    };
    match scram.step(token, lookup) {
        Ok(Step::Challenge(reply)) => Ok((reply, None)),
        Ok(Step::Done { user, response }) => {
            ::log::debug!(target: LOG_TARGET, "{peer} authenticated as {user:?} with {}", mechanism.name());
            Ok((response, Some(user)))
        }
        Err(e) => {
            ::log::info!(target: LOG_TARGET, "failed SASL authentication from {peer} with {}: {}", mechanism.name(), e.0);
            Err(e.0)
        }
    }
}
