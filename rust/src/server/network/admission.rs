//! Which connections the listener takes, as Kafka's `ConnectionQuotas` does: at most
//! `max.connections` in all and `max.connections.per.ip` from one address (with per-address
//! `max.connections.per.ip.overrides`), and, beyond Kafka, a client that authenticated is never
//! locked out by sockets that did not: when every slot is taken, the oldest connection that has
//! not authenticated yet is closed to make room (`Ticket::evicted`); when every slot of one
//! address is taken, the oldest such connection from that address. Without eviction, 10,000
//! silent sockets would keep every new client out until their deadline, and a few from an
//! address many clients share (127.0.0.1, a NAT) every client of that address.
//!
//! A connection counts as unauthenticated while its TLS handshake or its SASL exchange runs; on
//! a listener without SASL it counts as authenticated once accepted (and its TLS handshake, if
//! any, is done): nothing tells its clients apart then.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::storage::error::{Error, Result};

/// The limits (`kafkalite serve --max-connections`, `--max-connections-per-ip`,
/// `--max-connections-per-ip-overrides`).
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub max_per_ip: usize,
    pub overrides: HashMap<IpAddr, usize>,
}

/// Kafka's `max.connections.per.ip.overrides`: `host:count` pairs separated by commas (a host
/// name is resolved at start; an IPv6 address may be bracketed).
pub fn parse_overrides(spec: &str) -> Result<HashMap<IpAddr, usize>> {
    let mut out = HashMap::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || {
            Error::config(format!(
                "max.connections.per.ip.overrides entry {entry:?} is not HOST:COUNT (for example 10.0.0.5:50)"
            ))
        };
        let (host, count) = entry.rsplit_once(':').ok_or_else(bad)?;
        let count: usize = count.trim().parse().map_err(|_| bad())?;
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => (host, 0)
                .to_socket_addrs()
                .map_err(|e| {
                    Error::config(format!("cannot resolve {host:?} in max.connections.per.ip.overrides: {e}"))
                })?
                .map(|a| a.ip())
                .collect(),
        };
        if ips.is_empty() {
            return Err(bad());
        }
        for ip in ips {
            out.insert(ip, count);
        }
    }
    Ok(out)
}

#[derive(Default)]
struct State {
    open: usize,
    by_ip: HashMap<IpAddr, usize>,
    /// The connections not authenticated yet, oldest first (by admission number).
    unauthenticated: BTreeMap<u64, (IpAddr, Arc<Notify>)>,
    /// The same, by address.
    unauthenticated_by_ip: HashMap<IpAddr, BTreeSet<u64>>,
    next: u64,
}

impl State {
    /// Stop counting `id` as unauthenticated; its wake-up if it was.
    fn authenticated(&mut self, id: u64) -> Option<Arc<Notify>> {
        let (ip, evicted) = self.unauthenticated.remove(&id)?;
        if let Some(ids) = self.unauthenticated_by_ip.get_mut(&ip) {
            ids.remove(&id);
            if ids.is_empty() {
                self.unauthenticated_by_ip.remove(&ip);
            }
        }
        Some(evicted)
    }

    /// Tell the oldest unauthenticated connection (of `ip`, or of any address) to close; false:
    /// there is none.
    fn evict_oldest(&mut self, ip: Option<IpAddr>) -> bool {
        let oldest = match ip {
            Some(ip) => self.unauthenticated_by_ip.get(&ip).and_then(|ids| ids.first().copied()),
            None => self.unauthenticated.keys().next().copied(),
        };
        match oldest.and_then(|id| self.authenticated(id)) {
            Some(evicted) => {
                evicted.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The listener's connection counts.
pub struct Admission {
    limits: Limits,
    state: Mutex<State>,
}

/// Why a connection was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// `max.connections.per.ip` (or its override) connections from this address are open.
    PerIp(usize),
    /// `max.connections` are open and every one has authenticated.
    Full(usize),
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission { limits, state: Mutex::new(State::default()) })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change below is a few counters and map entries made together, none can panic
        // half-way: the state is consistent after a panic elsewhere.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take a connection from `ip`, unauthenticated; when every slot (of `ip`, or of the
    /// listener) is taken, the oldest unauthenticated connection (from `ip`, or from anywhere) is
    /// told to close (its `evicted` resolves) and this one counted.
    pub fn admit(self: &Arc<Admission>, ip: IpAddr) -> std::result::Result<Ticket, Refused> {
        let cap = self.limits.overrides.get(&ip).copied().unwrap_or(self.limits.max_per_ip);
        let mut s = self.state();
        // One eviction makes room under both limits: the evicted connection holds a slot of
        // the listener too.
        let ip_full = s.by_ip.get(&ip).copied().unwrap_or(0) >= cap;
        if ip_full && !s.evict_oldest(Some(ip)) {
            return Err(Refused::PerIp(cap));
        }
        if !ip_full && s.open >= self.limits.max_connections && !s.evict_oldest(None) {
            return Err(Refused::Full(self.limits.max_connections));
        }
        s.open += 1;
        *s.by_ip.entry(ip).or_default() += 1;
        let id = s.next;
        s.next += 1;
        let evicted = Arc::new(Notify::new());
        s.unauthenticated.insert(id, (ip, Arc::clone(&evicted)));
        s.unauthenticated_by_ip.entry(ip).or_default().insert(id);
        Ok(Ticket { admission: Arc::clone(self), ip, id, evicted })
    }
}

/// One admitted connection's slot, given back when it is dropped.
pub struct Ticket {
    admission: Arc<Admission>,
    ip: IpAddr,
    id: u64,
    evicted: Arc<Notify>,
}

impl Ticket {
    /// The connection authenticated: it is never evicted from now on.
    pub fn authenticated(&self) {
        self.admission.state().authenticated(self.id);
    }

    /// Resolves when the connection must close to make room for a new one (it had not
    /// authenticated, and it was the oldest such when the listener was full).
    pub async fn evicted(&self) {
        self.evicted.notified().await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.admission.state();
        s.open -= 1;
        s.authenticated(self.id);
        if let Some(n) = s.by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                s.by_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_connections: usize, max_per_ip: usize) -> Limits {
        Limits { max_connections, max_per_ip, overrides: HashMap::new() }
    }

    #[test]
    fn per_ip_caps_overrides_and_eviction_of_the_oldest_unauthenticated() {
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let mut l = limits(3, 2);
        l.overrides.insert(b, 1);
        let admission = Admission::new(l);
        let first = admission.admit(a).unwrap();
        let second = admission.admit(a).unwrap();
        first.authenticated();
        second.authenticated();
        assert_eq!(admission.admit(a).err(), Some(Refused::PerIp(2)));
        drop(second);
        let second = admission.admit(a).unwrap();
        let third = admission.admit(b).unwrap();
        third.authenticated();
        assert_eq!(admission.admit(b).err(), Some(Refused::PerIp(1)), "the override");
        drop(second); // a slot of `a` free again; the listener has 2 of 3
        let fourth = admission.admit(a).unwrap();
        // Full: the oldest unauthenticated (`fourth`) is evicted to make room.
        let c: IpAddr = "127.0.0.3".parse().unwrap();
        let fifth = admission.admit(c).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async { tokio::time::timeout(std::time::Duration::from_secs(5), fourth.evicted()).await.unwrap() });
        drop(fourth);
        fifth.authenticated();
        assert_eq!(admission.admit(c).err(), Some(Refused::Full(3)), "every one authenticated: nothing to evict");
        drop(first);
        assert!(admission.admit(c).is_ok());
    }

    #[test]
    fn an_address_at_its_cap_makes_room_by_its_own_oldest_unauthenticated() {
        // Every client of 127.0.0.1 shares its cap: silent sockets from it must not lock out
        // the one that authenticates.
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let admission = Admission::new(limits(10, 3));
        let other = admission.admit(b).unwrap(); // older, but of another address: kept
        let authenticated = admission.admit(a).unwrap();
        authenticated.authenticated();
        let silent = [admission.admit(a).unwrap(), admission.admit(a).unwrap()];
        let newcomer = admission.admit(a).expect("room made by a silent socket of the same address");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let closed = |t: &Ticket| {
            rt.block_on(async { tokio::time::timeout(std::time::Duration::from_millis(50), t.evicted()).await.is_ok() })
        };
        assert!(closed(&silent[0]), "the oldest silent one of 127.0.0.1");
        assert!(!closed(&silent[1]) && !closed(&other) && !closed(&authenticated));
        drop(silent);
        newcomer.authenticated();
        let last = admission.admit(a).unwrap();
        last.authenticated();
        assert_eq!(admission.admit(a).err(), Some(Refused::PerIp(3)), "every one authenticated: refused");
    }

    #[test]
    fn overrides_parse_as_kafka_writes_them() {
        let o = parse_overrides("127.0.0.1:5, [::1]:7 ,localhost:9").unwrap();
        assert_eq!(o[&"127.0.0.1".parse::<IpAddr>().unwrap()], 9, "localhost resolves to 127.0.0.1 too");
        assert!(parse_overrides("127.0.0.1").is_err());
        assert!(parse_overrides("127.0.0.1:x").is_err());
        assert!(parse_overrides("").unwrap().is_empty());
    }
}
