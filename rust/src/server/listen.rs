//! Which addresses the server may listen on, and with what security. Kafka without
//! authentication is open to anyone who can reach the port, so a listener on anything but
//! loopback is SASL_PLAINTEXT (SCRAM), and starts only once the data directory has a user.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::error::{Error, Result};

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

/// Kafka's name for the listener's security protocol.
pub fn security_protocol(sasl: bool) -> &'static str {
    if sasl {
        "SASL_PLAINTEXT"
    } else {
        "PLAINTEXT"
    }
}

/// Refuse to start a SASL listener on a data directory without users: nobody could connect,
/// and on a non-loopback address there is no unauthenticated fallback.
pub fn check_users(listen: &str, loopback: bool, has_users: bool) -> Result<()> {
    if has_users {
        return Ok(());
    }
    let why = if loopback {
        "SASL was asked for".to_string()
    } else {
        format!("{listen} is not a loopback address, so clients must authenticate with SASL/SCRAM")
    };
    Err(Error::config(format!(
        "cannot listen on {listen}: {why}, and the data directory has no users; add one with \
         `kafkalite users add NAME` (or listen on 127.0.0.1 without SASL)"
    )))
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
        let err = check_users("0.0.0.0:9092", false, false).unwrap_err().to_string();
        assert!(err.contains("kafkalite users add"), "{err}");
        assert!(check_users("0.0.0.0:9092", false, true).is_ok());
        let any = resolve("0.0.0.0:9092").unwrap().0;
        assert!(check_advertised("0.0.0.0:9092", any, None).unwrap_err().to_string().contains("advertised"));
        assert!(check_advertised("0.0.0.0:9092", any, Some("host:9092")).is_ok());
    }
}
