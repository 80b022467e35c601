//! Connection creation rate limits, as Kafka's `ConnectionQuotas` (KIP-612), checked by the
//! accept loop before a connection gets a task or a buffer:
//!
//! - `max.connection.creation.rate` (`--max-connection-creation-rate`, unlimited by default):
//!   every accepted connection is recorded; over the rate the acceptor waits out the throttle
//!   time before it takes this connection and the next (Kafka's `waitForConnectionSlot`), so a
//!   flood queues in the kernel's backlog instead of costing the server CPU.
//! - the ip entities' `connection_creation_rate` quota (`quotas.rs`): a connection from an
//!   address over its rate is not served; it is closed once its throttle time has passed
//!   (Kafka's delayed close, so a client reconnecting at once is slowed down too), and taken back
//!   from the listener's rate and the address's (Kafka's `sensor.record(-1)`).
//!
//! The rate is Kafka's sampled `Rate` over `quota.window.num` windows of
//! `quota.window.size.seconds` (the `Sensor` of the byte quotas); a throttle time is at most one
//! window (Kafka's `maxThrottleTimeMs`). With neither limit set an accept costs one atomic load.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::server::state::quotas::Sensor;

/// Kafka's `maxThrottleTimeMs`: one quota window.
const MAX_THROTTLE_MS: u64 = 1000;
/// Addresses whose sensors are kept before those with nothing in the window are dropped
/// (Kafka expires them after an hour idle).
const MAX_SENSORS: usize = 10_000;
/// Throttled connections held open until their delayed close; past this many a throttled
/// connection is closed at once (each holds a descriptor).
const MAX_HELD: usize = 1024;

/// The listener's connection rates.
pub struct ConnectionRate {
    /// `max.connection.creation.rate` and its sensor; None: unlimited.
    broker: Option<(f64, Mutex<Sensor>)>,
    ips: Mutex<HashMap<IpAddr, Sensor>>,
    epoch: Instant,
}

impl ConnectionRate {
    pub fn new(max_creation_rate: Option<u32>) -> ConnectionRate {
        ConnectionRate {
            broker: max_creation_rate.map(|r| (r as f64, Mutex::new(Sensor::default()))),
            ips: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Record one accepted connection against `max.connection.creation.rate`; how long the
    /// acceptor waits before serving it (zero within the rate).
    pub fn accepted(&self) -> Duration {
        let Some((rate, sensor)) = &self.broker else { return Duration::ZERO };
        let now = self.now_ms();
        let mut s = sensor.lock().unwrap_or_else(|e| e.into_inner());
        s.record(now, 1.0);
        Duration::from_millis(s.throttle_ms(now, *rate).min(MAX_THROTTLE_MS))
    }

    /// Record a connection from `ip` against its `connection_creation_rate` (`quota`; None:
    /// unlimited); Some(throttle): over it, the connection is not served and is taken back
    /// from both rates.
    pub fn ip_throttle(&self, ip: IpAddr, quota: Option<f64>) -> Option<Duration> {
        let quota = quota?;
        let now = self.now_ms();
        let throttle = {
            let mut ips = self.ips.lock().unwrap_or_else(|e| e.into_inner());
            if ips.len() >= MAX_SENSORS && !ips.contains_key(&ip) {
                ips.retain(|_, s| {
                    s.purge(now);
                    !s.samples.is_empty()
                });
            }
            let s = ips.entry(ip).or_default();
            s.record(now, 1.0);
            let throttle = s.throttle_ms(now, quota).min(MAX_THROTTLE_MS);
            if throttle > 0 {
                s.record(now, -1.0);
            }
            throttle
        };
        if throttle == 0 {
            return None;
        }
        if let Some((_, sensor)) = &self.broker {
            sensor.lock().unwrap_or_else(|e| e.into_inner()).record(now, -1.0);
        }
        Some(Duration::from_millis(throttle))
    }
}

/// Closes throttled connections once their throttle time has passed: one task for the
/// listener, not one per connection.
pub struct DelayedClose {
    tx: mpsc::Sender<(Instant, TcpStream)>,
}

impl DelayedClose {
    /// Start the closing task (on the current runtime).
    pub fn start() -> DelayedClose {
        let (tx, mut rx) = mpsc::channel::<(Instant, TcpStream)>(MAX_HELD);
        tokio::spawn(async move {
            let mut held: Vec<(Instant, TcpStream)> = Vec::new();
            loop {
                let next = held.iter().map(|(at, _)| *at).min();
                tokio::select! {
                    received = rx.recv() => match received {
                        Some(entry) => held.push(entry),
                        None => return, // the listener stopped: `held` is dropped, closing them
                    },
                    _ = async {
                        match next {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => std::future::pending().await,
                        }
                    } => {
                        let now = Instant::now();
                        held.retain(|(at, _)| *at > now);
                    }
                }
            }
        });
        DelayedClose { tx }
    }

    /// Close `stream` after `delay` (at once when too many are held already).
    pub fn close_after(&self, stream: TcpStream, delay: Duration) {
        // A full queue drops the stream here: closed at once.
        let _ = self.tx.try_send((Instant::now() + delay, stream));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_rate_is_throttled_and_taken_back() {
        let rate = ConnectionRate::new(None);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(rate.accepted(), Duration::ZERO, "unlimited");
        assert_eq!(rate.ip_throttle(ip, None), None, "no quota");
        // 2/s over the 10 s minimum window: 20 connections within it, the 21st throttled.
        for i in 0..20 {
            assert_eq!(rate.ip_throttle(ip, Some(2.0)), None, "connection {i}");
        }
        let throttle = rate.ip_throttle(ip, Some(2.0)).expect("over 2/s");
        assert!(throttle > Duration::ZERO && throttle <= Duration::from_millis(MAX_THROTTLE_MS), "{throttle:?}");
        // Taken back: still over, never counted twice.
        assert!(rate.ip_throttle(ip, Some(2.0)).is_some());
        let total: f64 = rate.ips.lock().unwrap()[&ip].samples.iter().map(|(_, v)| v).sum();
        assert_eq!(total, 20.0, "throttled connections are not counted");
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(rate.ip_throttle(other, Some(2.0)), None, "each address has its own rate");

        let broker = ConnectionRate::new(Some(1));
        for _ in 0..10 {
            assert_eq!(broker.accepted(), Duration::ZERO);
        }
        assert!(broker.accepted() > Duration::ZERO, "the 11th within 10 s is over 1/s");
    }
}
