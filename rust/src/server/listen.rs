//! Which addresses the server may listen on. Kafka without authentication is open to anyone
//! who can reach the port, so until SASL/SCRAM exists the server binds loopback only.

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

/// Resolve `listen` and refuse anything but a loopback address.
pub fn loopback_address(listen: &str) -> Result<SocketAddr> {
    parse_host_port(listen)?;
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| Error::config(format!("cannot resolve listen address {listen:?}: {e}")))?
        .collect();
    let first =
        *addrs.first().ok_or_else(|| Error::config(format!("listen address {listen:?} resolves to nothing")))?;
    if let Some(open) = addrs.iter().find(|a| !a.ip().is_loopback()) {
        return Err(Error::config(format!(
            "cannot listen on {listen} ({}): kafkalite serve accepts only loopback addresses (127.0.0.1, ::1, localhost) \
             for now, because other addresses need authentication (SASL/SCRAM), which is not implemented yet",
            open.ip()
        )));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_only() {
        assert!(loopback_address("127.0.0.1:0").is_ok());
        assert!(loopback_address("[::1]:0").is_ok() || std::net::TcpListener::bind("[::1]:0").is_err());
        let err = loopback_address("0.0.0.0:9092").unwrap_err().to_string();
        assert!(err.contains("SASL/SCRAM"), "{err}");
        assert!(loopback_address("10.1.2.3:9092").is_err());
        assert!(loopback_address("127.0.0.1").is_err());
        assert!(loopback_address("127.0.0.1:99999").is_err());
    }
}
