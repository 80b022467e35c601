//! The server side of one SCRAM exchange (RFC 5802, with RFC 7677's SHA-256 and SHA-512), as
//! Kafka's `ScramSaslServer` runs it: client-first → server-first (nonce, salt, iterations),
//! client-final (channel binding, nonce, proof) → server-final (server signature).
//!
//! Every client message is hostile until checked: any bytes produce an error, never a panic.
//! An unknown user gets a made-up credential (`credentials`) and fails at the proof like a
//! wrong password, so the exchange does not tell which user names exist. Proofs are compared in
//! constant time.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use subtle::ConstantTimeEq;

use crate::coordination::users::{random_bytes, Credential, Mechanism};

/// The longest client message accepted (a real one is well under 1 KiB).
pub const MAX_MESSAGE: usize = 4096;
/// Random bytes in the server's part of the nonce.
const NONCE_BYTES: usize = 24;

/// Why an exchange failed; the message is what the client is told.
#[derive(Debug, PartialEq, Eq)]
pub struct ScramError(pub String);

/// What a client message leads to.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this challenge and wait for the client's next message.
    Challenge(Vec<u8>),
    /// Authenticated as `user`; send the server-final message.
    Done { user: String, response: Vec<u8> },
}

enum State {
    ClientFirst,
    ClientFinal(Box<Pending>),
    Finished,
}

/// What the server remembers between its first message and the client's final one.
struct Pending {
    user: String,
    /// The gs2 header the client sent (what `c=` must encode, without channel binding data).
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    credential: Credential,
    /// False for an unknown user: the exchange runs on a made-up credential and always fails.
    known: bool,
}

pub struct ScramServer {
    mechanism: Mechanism,
    state: State,
}

fn fail(why: impl Into<String>) -> ScramError {
    ScramError(why.into())
}

/// What Kafka tells a client whose password or user name is wrong (the same for both).
fn invalid_credentials(mechanism: Mechanism) -> ScramError {
    fail(format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        mechanism.name()
    ))
}

impl ScramServer {
    pub fn new(mechanism: Mechanism) -> ScramServer {
        ScramServer { mechanism, state: State::ClientFirst }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Take the client's next message. `lookup` finds a user's credential for this mechanism
    /// and whether the user exists (false: a made-up credential no proof matches; Err: the users
    /// file cannot be read, which fails the exchange).
    /// After an error the exchange is over: every later message fails too.
    pub fn step(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Result<(Credential, bool), String>,
    ) -> Result<Step, ScramError> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        if message.len() > MAX_MESSAGE {
            return Err(fail(format!("a SCRAM message of {} bytes is too long", message.len())));
        }
        let text = std::str::from_utf8(message).map_err(|_| fail("the SCRAM message is not UTF-8"))?;
        match state {
            State::ClientFirst => {
                let pending = self.client_first(text, lookup)?;
                let challenge = pending.server_first.clone().into_bytes();
                self.state = State::ClientFinal(Box::new(pending));
                Ok(Step::Challenge(challenge))
            }
            State::ClientFinal(pending) => self.client_final(text, &pending),
            State::Finished => Err(fail("the SCRAM exchange is already over")),
        }
    }

    fn client_first(
        &self,
        text: &str,
        lookup: impl FnOnce(&str) -> Result<(Credential, bool), String>,
    ) -> Result<Pending, ScramError> {
        let bad = || fail("Authentication failed: invalid SCRAM client first message");
        // gs2-header = gs2-cbind-flag "," [ authzid ] ","
        let (flag, rest) = text.split_once(',').ok_or_else(bad)?;
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => {
                return Err(fail("SCRAM channel binding is not supported (use SCRAM without -PLUS)"))
            }
            _ => return Err(bad()),
        }
        let (authzid, bare) = rest.split_once(',').ok_or_else(bad)?;
        let mut attrs = bare.split(',');
        let user = attrs.next().and_then(|a| a.strip_prefix("n=")).ok_or_else(bad).and_then(unescape_name)?;
        let client_nonce = attrs.next().and_then(|a| a.strip_prefix("r=")).ok_or_else(bad)?;
        if client_nonce.is_empty() || !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
            return Err(bad());
        }
        for ext in attrs {
            let (key, value) = ext.split_once('=').ok_or_else(bad)?;
            if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
                return Err(fail("Authentication failed: delegation tokens are not supported"));
            }
        }
        if !authzid.is_empty() {
            let authz = authzid.strip_prefix("a=").ok_or_else(bad).and_then(unescape_name)?;
            if authz != user {
                return Err(fail(
                    "Authentication failed: Client requested an authorization id that is different from username",
                ));
            }
        }
        let (credential, known) = lookup(&user).map_err(|e| fail(format!("Authentication failed: {e}")))?;
        let server_nonce = random_bytes(NONCE_BYTES).map_err(|e| fail(format!("Authentication failed: {e}")))?;
        let nonce = format!("{client_nonce}{}", BASE64.encode(server_nonce));
        let server_first = format!("r={nonce},s={},i={}", BASE64.encode(&credential.salt), credential.iterations);
        Ok(Pending {
            user,
            gs2_header: format!("{flag},{authzid},"),
            client_first_bare: bare.to_string(),
            server_first,
            nonce,
            credential,
            known,
        })
    }

    fn client_final(&self, text: &str, p: &Pending) -> Result<Step, ScramError> {
        let bad = || fail("Authentication failed: invalid SCRAM client final message");
        // client-final-message-without-proof "," proof, the proof last.
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(bad)?;
        let mut attrs = without_proof.split(',');
        let binding = attrs.next().and_then(|a| a.strip_prefix("c=")).ok_or_else(bad)?;
        let nonce = attrs.next().and_then(|a| a.strip_prefix("r=")).ok_or_else(bad)?;
        if BASE64.decode(binding).ok().as_deref() != Some(p.gs2_header.as_bytes()) {
            return Err(fail("Authentication failed: invalid SCRAM channel binding"));
        }
        if nonce != p.nonce {
            return Err(fail("Authentication failed: Invalid client nonce in the final client message."));
        }
        let proof = BASE64.decode(proof).map_err(|_| bad())?;
        if proof.len() != self.mechanism.hash_len() {
            return Err(invalid_credentials(self.mechanism));
        }
        let auth_message = format!("{},{},{without_proof}", p.client_first_bare, p.server_first);
        let m = self.mechanism;
        let client_signature = m.hmac(&p.credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(a, b)| a ^ b).collect();
        let matches: bool = m.hash(&client_key).ct_eq(&p.credential.stored_key).into();
        if !(matches && p.known) {
            return Err(invalid_credentials(m));
        }
        let server_signature = m.hmac(&p.credential.server_key, auth_message.as_bytes());
        Ok(Step::Done { user: p.user.clone(), response: format!("v={}", BASE64.encode(server_signature)).into_bytes() })
    }
}

/// A SCRAM `saslname`: "=2C" is ',' and "=3D" is '='; any other '=' is malformed.
fn unescape_name(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(fail("Authentication failed: invalid escape in the SCRAM user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(fail("Authentication failed: empty SCRAM user name"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A client side written from RFC 5802 §3 for the tests: its final message for `password`.
    fn client_final(m: Mechanism, password: &[u8], client_first_bare: &str, server_first: &str) -> String {
        let fields: Vec<&str> = server_first.split(',').collect();
        let nonce = &fields[0][2..];
        let salt = BASE64.decode(&fields[1][2..]).unwrap();
        let iterations: u32 = fields[2][2..].parse().unwrap();
        let salted = m.salted_password(password, &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = m.hmac(&m.hash(&client_key), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", BASE64.encode(proof))
    }

    fn users(m: Mechanism) -> impl Fn(&str) -> Result<(Credential, bool), String> {
        move |user| Ok((Credential::derive(m, b"pw", b"salty", 16), user == "alice"))
    }

    fn exchange(m: Mechanism, user: &str, password: &[u8]) -> Result<Step, ScramError> {
        let mut s = ScramServer::new(m);
        let bare = format!("n={user},r=fyko+d2lbbFgONRv9qkxdawL");
        let Step::Challenge(first) = s.step(format!("n,,{bare}").as_bytes(), users(m))? else { panic!() };
        let first = String::from_utf8(first).unwrap();
        assert!(first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"));
        let fin = client_final(m, password, &bare, &first);
        s.step(fin.as_bytes(), users(m))
    }

    #[test]
    fn both_mechanisms_authenticate_and_refuse() {
        for m in Mechanism::ALL {
            let Step::Done { user, response } = exchange(m, "alice", b"pw").unwrap() else { panic!() };
            assert_eq!(user, "alice");
            assert!(response.starts_with(b"v="));
            assert_eq!(exchange(m, "alice", b"wrong"), Err(invalid_credentials(m)));
            assert_eq!(
                exchange(m, "mallory", b"pw"),
                Err(invalid_credentials(m)),
                "unknown user fails like a bad password"
            );
        }
    }

    #[test]
    fn wrong_nonce_binding_and_replays_fail() {
        let m = Mechanism::ScramSha256;
        let mut s = ScramServer::new(m);
        let Step::Challenge(first) = s.step(b"n,,n=alice,r=abc", users(m)).unwrap() else { panic!() };
        let first = String::from_utf8(first).unwrap();
        let fin = client_final(m, b"pw", "n=alice,r=abc", &first.replacen("r=abc", "r=abd", 1));
        assert!(s.step(fin.as_bytes(), users(m)).unwrap_err().0.contains("nonce"));
        assert!(s.step(b"anything", users(m)).is_err(), "no second try on the same exchange");
        let mut s = ScramServer::new(m);
        let Step::Challenge(first) = s.step(b"n,,n=alice,r=abc", users(m)).unwrap() else { panic!() };
        let fin =
            client_final(m, b"pw", "n=alice,r=abc", &String::from_utf8(first).unwrap()).replace("c=biws", "c=eSws");
        assert!(s.step(fin.as_bytes(), users(m)).unwrap_err().0.contains("channel binding"));
    }

    #[test]
    fn names_are_unescaped() {
        assert_eq!(unescape_name("a=2Cb=3Dc").unwrap(), "a,b=c");
        assert!(unescape_name("a=2").is_err());
        assert!(unescape_name("a=41").is_err());
        assert!(unescape_name("").is_err());
    }

    proptest! {
        /// Any bytes as either message: an answer or an error, never a panic.
        #[test]
        fn hostile_messages_never_panic(first in proptest::collection::vec(any::<u8>(), 0..300),
                                        last in proptest::collection::vec(any::<u8>(), 0..300)) {
            let m = Mechanism::ScramSha256;
            let mut s = ScramServer::new(m);
            let _ = s.step(&first, users(m));
            let _ = s.step(&last, users(m));
            let mut s = ScramServer::new(m);
            if s.step(b"n,,n=alice,r=x", users(m)).is_ok() {
                let _ = s.step(&last, users(m));
            }
        }

        #[test]
        fn hostile_text_never_panics(first in "[nyp=a,r=2C3D\\x00-\\x7f\u{80}-\u{10ffff}]{0,80}",
                                     last in "[cpr=,biwsxyz]{0,80}") {
            let m = Mechanism::ScramSha512;
            let mut s = ScramServer::new(m);
            let _ = s.step(first.as_bytes(), users(m));
            let _ = s.step(last.as_bytes(), users(m));
        }
    }
}
