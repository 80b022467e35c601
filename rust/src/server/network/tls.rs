//! TLS listeners (Kafka's SSL and SASL_SSL) with rustls: the server's certificate chain and key
//! from PEM files (`--tls-cert`, `--tls-key`), and with `--tls-client-ca` client certificates
//! required and checked against that CA (Kafka's `ssl.client.auth=required`), the connection's
//! principal then being `User:<subject DN>` (`subject_dn`, Kafka's default principal builder).
//!
//! The handshake runs in the connection's own task, on the async workers without blocking them
//! (rustls does the crypto in small steps between reads), and must finish within
//! `HANDSHAKE_TIMEOUT` (or `connections.max.idle.ms` if shorter): a client that connects and
//! sends nothing, sends plaintext Kafka to the TLS port or fails the handshake is closed with one
//! WARNING naming it and the reason; nobody else notices.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use x509_cert::der::{Decode, Encode, Tag, Tagged};

use crate::server::log_target::LOG_TARGET;
use crate::server::security::principal::Principal;
use crate::storage::error::{Error, Result};

/// The longest a TLS handshake may take (or `connections.max.idle.ms` if shorter). Kafka's
/// clients finish theirs in milliseconds; this only ends connections that will never finish.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first byte of every TLS connection: a handshake record (RFC 8446 5.1, content type 22).
const HANDSHAKE_RECORD: u8 = 0x16;

/// The PEM files of a TLS listener.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The server's certificate, then the intermediates up to (not including) the CA.
    pub cert: PathBuf,
    /// The server certificate's private key (PKCS#8, PKCS#1 or SEC1, unencrypted).
    pub key: PathBuf,
    /// CA certificates that sign client certificates; Some: every client must present one.
    pub client_ca: Option<PathBuf>,
}

fn unreadable(what: &str, path: &Path, why: impl std::fmt::Display) -> Error {
    Error::config(format!("cannot use {} {}: {why}", what, path.display()))
}

fn certificates(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(what, path, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| unreadable(what, path, e))?;
    if certs.is_empty() {
        return Err(unreadable(what, path, "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
    }
    Ok(certs)
}

/// The acceptor of a TLS listener: checks the files now, so a bad one stops the start with a
/// message naming it. A server certificate outside its validity period is only warned about
/// (clients will refuse it, and a renewed file needs a restart).
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates("the TLS certificate (--tls-cert)", &files.cert)?;
    warn_if_not_valid_now(&chain[0], &files.cert);
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| unreadable("the TLS private key (--tls-key)", &files.key, e))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config(format!("TLS: {e}")))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let what = "the client CA (--tls-client-ca)";
            let mut roots = RootCertStore::empty();
            for ca in certificates(what, path)? {
                roots.add(ca).map_err(|e| unreadable(what, path, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| unreadable(what, path, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        Error::config(format!(
            "cannot use the TLS certificate {} with the key {}: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn warn_if_not_valid_now(cert: &CertificateDer<'_>, path: &Path) {
    let Ok(cert) = x509_cert::Certificate::from_der(cert) else { return };
    let validity = cert.tbs_certificate().validity();
    let (from, until) = (validity.not_before.to_system_time(), validity.not_after.to_system_time());
    let now = SystemTime::now();
    if now > until || now < from {
        ::log::warn!(
            target: LOG_TARGET,
            "the TLS certificate {} is valid from {} to {}, not now: clients will refuse it",
            path.display(),
            validity.not_before,
            validity.not_after
        );
    }
}

/// Why a connection closed before its TLS session began (logged as one WARNING by the caller);
/// None: it closed without sending anything, as port probes and health checks do.
pub type Refused = Option<String>;

/// Run the server side of the TLS handshake within `deadline`: the TLS stream and, when client
/// certificates are required, the principal from the client's.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    deadline: Duration,
) -> std::result::Result<(TlsStream<TcpStream>, Option<Principal>), Refused> {
    let run = async {
        let mut first = [0u8; 1];
        match stream.peek(&mut first).await {
            Ok(0) => return Err(None),
            Ok(_) if first[0] != HANDSHAKE_RECORD => {
                return Err(Some(format!(
                    "it did not start a TLS handshake (first byte 0x{:02x}): a client without TLS \
                     (security.protocol PLAINTEXT or SASL_PLAINTEXT) on this TLS listener?",
                    first[0]
                )))
            }
            Ok(_) => {}
            Err(e) => return Err(Some(format!("reading its TLS handshake failed: {e}"))),
        }
        let tls = acceptor.accept(stream).await.map_err(|e| Some(format!("TLS handshake failed: {e}")))?;
        let principal = match tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
            None => None,
            Some(cert) => Some(Principal::user(subject_dn(cert).map_err(Some)?)),
        };
        Ok((tls, principal))
    };
    match tokio::time::timeout(deadline, run).await {
        Ok(done) => done,
        Err(_) => Err(Some(format!("no TLS handshake within {} ms", deadline.as_millis()))),
    }
}

/// The subject of a DER certificate as Java's `X500Principal.getName()` writes it (RFC 2253),
/// which Kafka's default principal builder uses: the RDNs last to first, joined by ",", e.g.
/// `CN=alice,OU=eng,O=Example,C=US`; CN, C, L, ST, O, OU, STREET, DC and UID by name, other
/// attributes as `<dotted OID>=#<hex of the DER value>` (e.g. emailAddress).
pub fn subject_dn(der: &[u8]) -> std::result::Result<String, String> {
    let cert = x509_cert::Certificate::from_der(der).map_err(|e| format!("cannot parse its certificate: {e}"))?;
    let mut rdns: Vec<String> = cert
        .tbs_certificate()
        .subject()
        .as_ref()
        .iter()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    rdns.reverse();
    Ok(rdns.join(","))
}

/// Java's RFC 2253 keywords (`X500Principal.RFC2253`); any other type is written as its OID.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn attribute(atv: &x509_cert::attr::AttributeTypeAndValue) -> String {
    let oid = atv.oid.to_string();
    match (keyword(&oid), text(&atv.value)) {
        (Some(key), Some(value)) => format!("{key}={}", escape(&value)),
        _ => {
            let der = atv.value.to_der().unwrap_or_default();
            format!("{oid}=#{}", der.iter().map(|b| format!("{b:02x}")).collect::<String>())
        }
    }
}

/// A directory string's text, decoded as Java decodes it; None for other value types.
fn text(value: &x509_cert::der::Any) -> Option<String> {
    let bytes = value.value();
    match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::VisibleString => {
            String::from_utf8(bytes.to_vec()).ok()
        }
        Tag::TeletexString => Some(bytes.iter().map(|&b| b as char).collect()), // ISO-8859-1, as Java
        Tag::BmpString if bytes.len().is_multiple_of(2) => {
            char::decode_utf16(bytes.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
                .collect::<std::result::Result<_, _>>()
                .ok()
        }
        _ => None,
    }
}

/// RFC 2253 escaping as Java's `X500Principal` does it: `,=+<>#;"\` always, and a leading or
/// trailing space.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        if ",=+<>#;\"\\".contains(c) || (c == ' ' && (i == 0 || i == last)) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_as_java() {
        assert_eq!(escape("alice"), "alice");
        assert_eq!(escape("a,b+c=d"), "a\\,b\\+c\\=d");
        assert_eq!(escape(" x "), "\\ x\\ ");
        assert_eq!(escape("#1"), "\\#1");
        assert_eq!(escape("ça ✓"), "ça ✓");
    }
}
