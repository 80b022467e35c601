//! Which addresses the server may listen on, and with what security (Kafka's four security
//! protocols). Kafka without authentication is open to anyone who can reach the port, and
//! without TLS every record crosses the network in clear, so a listener on anything but loopback
//! needs both: TLS (`--tls-cert`, `--tls-key`; SSL or SASL_SSL), and clients that authenticate,
//! with SASL/SCRAM as one of the data directory's users or with a certificate from
//! `--tls-client-ca`. Without TLS it starts only when told `--allow-plaintext`, as SASL_PLAINTEXT,
//! with a WARNING. Loopback listeners are PLAINTEXT unless asked for SASL or TLS.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::storage::error::{Error, Result};

/// HOST:PORT (HOST may be a bracketed IPv6 address) into its parts.
pub fn parse_host_port(s: &str) -> Result<(String, i32)> {
    let bad = || Error::config(format!("{s:?} is not HOST:PORT (for example 127.0.0.1:9092)"));
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port as i32))
}

/// Resolve `listen`: the address to bind, and whether it is loopback (every address the name
/// resolves to is). A listener that is not loopback must authenticate its clients (SASL).
pub fn resolve(listen: &str) -> Result<(SocketAddr, bool)> {
    parse_host_port(listen)?;
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| Error::config(format!("cannot resolve listen address {listen:?}: {e}")))?
        .collect();
    let first =
        *addrs.first().ok_or_else(|| Error::config(format!("listen address {listen:?} resolves to nothing")))?;
    Ok((first, addrs.iter().all(|a| a.ip().is_loopback())))
}

/// What a listener asks of its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Security {
    /// TLS (SSL, SASL_SSL).
    pub tls: bool,
    /// SASL/SCRAM (SASL_PLAINTEXT, SASL_SSL).
    pub sasl: bool,
}

impl Security {
    /// Kafka's name for the listener's security protocol.
    pub fn protocol(self) -> &'static str {
        match (self.tls, self.sasl) {
            (false, false) => "PLAINTEXT",
            (false, true) => "SASL_PLAINTEXT",
            (true, false) => "SSL",
            (true, true) => "SASL_SSL",
        }
    }
}

/// What the listener was asked for.
#[derive(Clone, Copy, Debug)]
pub struct Asked {
    /// `--sasl`: SASL/SCRAM on a loopback listener too.
    pub sasl: bool,
    /// `--tls-cert`/`--tls-key` given.
    pub tls: bool,
    /// `--tls-client-ca` given: clients authenticate with certificates.
    pub client_certs: bool,
    /// `--allow-plaintext`: a listener beyond loopback without TLS.
    pub allow_plaintext: bool,
}

/// Decide the listener's security, or refuse to start naming everything that is missing.
/// Beyond loopback clients must authenticate (SASL, unless client certificates are required)
/// and TLS is required unless `allow_plaintext` (then a WARNING). SASL needs a user in the
/// data directory (`has_users`, asked only when SASL is on): nobody could connect otherwise.
pub fn security(
    listen: &str,
    loopback: bool,
    asked: Asked,
    has_users: impl FnOnce() -> Result<bool>,
) -> Result<Security> {
    let sasl = asked.sasl || (!loopback && !asked.client_certs);
    let mut missing = Vec::new();
    if sasl && !has_users()? {
        missing.push(if loopback {
            "SASL was asked for, and the data directory has no users: add one with `kafkalite users add NAME` \
             (or listen on 127.0.0.1 without SASL)"
                .to_string()
        } else {
            "clients must authenticate with SASL/SCRAM, and the data directory has no users: add one with \
             `kafkalite users add NAME` (or require client certificates with --tls-client-ca)"
                .to_string()
        });
    }
    let clear = Exposure {
        accepted: asked.allow_plaintext,
        refusal: "records and logins would cross the network in clear: give a TLS certificate and key \
                  (--tls-cert PEM --tls-key PEM; tls=... in kafkalite.Server), or --allow-plaintext to accept that",
        warning: format!(
            "WARNING: listening on {listen} WITHOUT TLS (--allow-plaintext): every record, and every \
             client's SCRAM exchange, crosses the network in clear, readable and alterable by anyone on \
             the path; give --tls-cert and --tls-key to encrypt"
        ),
    };
    let warning = match exposed(loopback, (!asked.tls).then_some(clear)) {
        Ok(warning) => warning,
        Err(refusal) => {
            missing.push(refusal.to_string());
            None
        }
    };
    if !missing.is_empty() {
        return Err(Error::config(format!("cannot listen on {listen}{}: {}", beyond(loopback), missing.join("; "))));
    }
    if let Some(warning) = warning {
        ::log::warn!(target: crate::server::log_target::LOG_TARGET, "{warning}");
    }
    Ok(Security { tls: asked.tls, sasl })
}

/// What a socket beyond loopback would expose (it lacks TLS, or authentication), and whether
/// that was accepted with its flag (`--allow-plaintext`, `--metrics-allow-remote`).
pub struct Exposure {
    pub accepted: bool,
    /// What is wrong and how to fix or accept it, for the refusal.
    pub refusal: &'static str,
    /// The WARNING logged at each start when it was accepted.
    pub warning: String,
}

/// The one rule of every socket the server listens on: on loopback it may lack TLS and
/// authentication; beyond it, what it lacks (`exposure`; None: it lacks nothing) is refused
/// (Err: the refusal's reason) unless accepted, and then the WARNING to log (Some).
pub fn exposed(loopback: bool, exposure: Option<Exposure>) -> std::result::Result<Option<String>, &'static str> {
    match exposure {
        Some(e) if !loopback && !e.accepted => Err(e.refusal),
        Some(e) if !loopback => Ok(Some(e.warning)),
        _ => Ok(None),
    }
}

/// What a refusal says of an address that is not loopback.
fn beyond(loopback: bool) -> &'static str {
    if loopback {
        ""
    } else {
        ", which is not a loopback address"
    }
}

/// The metrics endpoint (`--metrics`): plain HTTP without authentication whose page names every
/// topic and group with its lag, so under the listener's rule (`exposed`) it is loopback only
/// unless `allow_remote` (`--metrics-allow-remote`). Returns the address to bind.
pub fn metrics(at: &str, allow_remote: bool) -> Result<SocketAddr> {
    let (addr, loopback) = resolve(at).map_err(|e| match e {
        Error::InvalidConfig(why) => Error::config(format!("metrics endpoint: {why}")),
        other => other,
    })?;
    let open = Exposure {
        accepted: allow_remote,
        refusal: "the metrics page has neither TLS nor authentication and names every topic and group, with \
                  each group's lag, to anyone who can reach it: serve it on 127.0.0.1 (and scrape it through \
                  a proxy that authenticates), or give --metrics-allow-remote (metrics_allow_remote=True) to \
                  accept that",
        warning: format!(
            "WARNING: serving metrics on {at} beyond loopback (--metrics-allow-remote): every topic and group \
             name, with each group's lag, is readable by anyone who can reach it, without TLS or authentication"
        ),
    };
    match exposed(loopback, Some(open)) {
        Err(why) => Err(Error::config(format!("metrics endpoint: cannot listen on {at}{}: {why}", beyond(loopback)))),
        Ok(warning) => {
            if let Some(warning) = warning {
                ::log::warn!(target: crate::server::log_target::LOG_TARGET, "{warning}");
            }
            Ok(addr)
        }
    }
}

/// Kafka refuses to advertise the wildcard address (0.0.0.0, ::): clients elsewhere cannot connect
/// to it. Listening on it therefore needs an advertised listener.
pub fn check_advertised(listen: &str, addr: SocketAddr, advertised: Option<&str>) -> Result<()> {
    if advertised.is_none() && addr.ip().is_unspecified() {
        return Err(Error::config(format!(
            "listening on {listen} needs an advertised listener (--advertised-listener HOST:PORT, \
             advertised_listener=...): the address other machines reach this server at; clients cannot \
             connect to {} (Kafka refuses to advertise it too)",
            addr.ip()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_or_not() {
        assert!(resolve("127.0.0.1:0").unwrap().1);
        assert!(resolve("localhost:0").unwrap().1);
        assert!(resolve("[::1]:0").map(|r| r.1).unwrap_or(true));
        assert!(!resolve("0.0.0.0:9092").unwrap().1);
        assert!(!resolve("10.1.2.3:9092").unwrap().1);
        assert!(resolve("127.0.0.1").is_err());
        assert!(resolve("127.0.0.1:99999").is_err());
        let asked = Asked { sasl: false, tls: false, client_certs: false, allow_plaintext: false };
        let err = security("0.0.0.0:9092", false, asked, || Ok(false)).unwrap_err().to_string();
        assert!(err.contains("kafkalite users add") && err.contains("--tls-cert"), "{err}");
        let err = security("0.0.0.0:9092", false, asked, || Ok(true)).unwrap_err().to_string();
        assert!(!err.contains("kafkalite users add") && err.contains("--allow-plaintext"), "{err}");
        let plain = Asked { allow_plaintext: true, ..asked };
        assert_eq!(security("0.0.0.0:9092", false, plain, || Ok(true)).unwrap().protocol(), "SASL_PLAINTEXT");
        let tls = Asked { tls: true, ..asked };
        assert_eq!(security("0.0.0.0:9092", false, tls, || Ok(true)).unwrap().protocol(), "SASL_SSL");
        let certs = Asked { tls: true, client_certs: true, ..asked };
        assert_eq!(security("0.0.0.0:9092", false, certs, || panic!("no SASL")).unwrap().protocol(), "SSL");
        assert_eq!(security("127.0.0.1:9092", true, asked, || panic!("no SASL")).unwrap().protocol(), "PLAINTEXT");
        assert_eq!(security("127.0.0.1:9092", true, tls, || panic!("no SASL")).unwrap().protocol(), "SSL");
        let sasl = Asked { sasl: true, ..asked };
        assert!(security("127.0.0.1:9092", true, sasl, || Ok(false)).is_err());
        let err = metrics("0.0.0.0:9404", false).unwrap_err().to_string();
        assert!(err.contains("--metrics-allow-remote") && err.contains("not a loopback address"), "{err}");
        assert!(metrics("0.0.0.0:9404", true).is_ok());
        assert!(metrics("127.0.0.1:0", false).is_ok());
        let any = resolve("0.0.0.0:9092").unwrap().0;
        assert!(check_advertised("0.0.0.0:9092", any, None).unwrap_err().to_string().contains("advertised"));
        assert!(check_advertised("0.0.0.0:9092", any, Some("host:9092")).is_ok());
    }
}
