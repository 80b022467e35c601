//! Enforcing client quotas (Kafka's `ClientQuotaManager`): each Produce's record bytes and each
//! Fetch's response record bytes are recorded against the quota that applies to the request's
//! user and client id, found in Kafka's precedence order (`/config/users/<user>/clients/<client-id>`,
//! `.../clients/<default>`, `/config/users/<user>`, then `/config/users/<default>/...` likewise,
//! then `/config/clients/<client-id>`, `/config/clients/<default>`). The rate is Kafka's sampled
//! `Rate`: `quota.window.num` (11) windows of `quota.window.size.seconds` (1 s), measured over
//! at least all but one of them. Past the quota, the answer says by `throttle_time_ms` how long
//! to bring the rate back to it (`QuotaUtils.throttleTime`: (rate - quota) / quota x window),
//! and that entity's next request waits out that time before it is served, as Kafka mutes the
//! channel (clients back off themselves; this holds to it those that do not).
//!
//! The quotas are read from the data directory (`crate::quotas`) at start, adopted at once when
//! this server alters them, and re-read when the file changed, checked at most once a second
//! (one `stat`): no request parses the file. With no quota set a request costs one atomic load.
//! The ip entities' `connection_creation_rate` is looked up here too (`connection_rate`) and
//! enforced at accept (`connection_rate.rs`), on the same `Sensor`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::files::QUOTAS_FILE;
use crate::quotas::{
    read, resolve_ip, Entity, Quotas as Stored, CONNECTION_CREATION_RATE, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE,
};

/// Kafka's `quota.window.num` and `quota.window.size.seconds` defaults.
const WINDOWS: usize = 11;
const WINDOW_MS: u64 = 1000;
/// How often the file is checked for another process's changes.
const RECHECK_MS: u64 = 1000;
/// Sensors kept before those with no bytes in the window are dropped.
const MAX_SENSORS: usize = 10_000;

/// Which quota a request is recorded against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Produce,
    Fetch,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Produce => PRODUCER_BYTE_RATE,
            Kind::Fetch => CONSUMER_BYTE_RATE,
        }
    }
}

/// Kafka's `SampledStat` of a `Rate`: (window start ms, bytes) per window, oldest first.
#[derive(Default)]
pub(crate) struct Sensor {
    pub(crate) samples: Vec<(u64, f64)>,
    /// Until when this entity's requests wait (its last answer's throttle time).
    throttled_until: Option<Instant>,
}

impl Sensor {
    pub(crate) fn purge(&mut self, now: u64) {
        self.samples.retain(|(start, _)| now.saturating_sub(*start) < WINDOWS as u64 * WINDOW_MS);
    }

    pub(crate) fn record(&mut self, now: u64, value: f64) {
        self.purge(now);
        match self.samples.last_mut() {
            Some((start, total)) if now.saturating_sub(*start) < WINDOW_MS => *total += value,
            _ => {
                self.samples.push((now, value));
                if self.samples.len() > WINDOWS {
                    self.samples.remove(0);
                }
            }
        }
    }

    /// `Rate.windowSize`: the time since the oldest window began, at least all windows but one.
    fn window_ms(&self, now: u64) -> f64 {
        let oldest = self.samples.first().map_or(now, |(start, _)| *start);
        let mut elapsed = now.saturating_sub(oldest);
        let full = elapsed / WINDOW_MS;
        let min_full = WINDOWS as u64 - 1;
        if full < min_full {
            elapsed += (min_full - full) * WINDOW_MS;
        }
        elapsed as f64
    }

    /// `QuotaUtils.throttleTime`, 0 within the quota.
    pub(crate) fn throttle_ms(&self, now: u64, quota: f64) -> u64 {
        let window = self.window_ms(now);
        let rate = self.samples.iter().map(|(_, v)| v).sum::<f64>() / (window / 1000.0);
        if rate <= quota {
            return 0;
        }
        ((rate - quota) / quota * window).round() as u64
    }
}

/// The sensor a request's bytes go to: the quota type and the user and client id the quota that
/// applies names by type (Kafka's metric tags; a default applies to each name on its own).
type SensorKey = (Kind, Option<String>, Option<String>);

/// The quotas in force and every throttled entity's recent rate.
pub struct QuotaManager {
    dir: PathBuf,
    stored: RwLock<Stored>,
    /// Any quota at all: without one, nothing is looked up or recorded.
    any: AtomicBool,
    /// The file's identity when `stored` was read, and when it was last checked.
    stamp: Mutex<Option<Stamp>>,
    checked_ms: AtomicU64,
    sensors: Mutex<HashMap<SensorKey, Sensor>>,
    epoch: Instant,
    /// The ip entities' connection_creation_rate, addresses resolved (`ip_rates`).
    ips: RwLock<IpRates>,
}

/// `connection_creation_rate` by address, and the `<default>` ip's.
#[derive(Default)]
struct IpRates {
    by_ip: HashMap<IpAddr, f64>,
    default: Option<f64>,
}

/// The ip quotas of `stored`, each name resolved once here (as Kafka when the quota is set).
fn ip_rates(stored: &Stored) -> IpRates {
    let mut out = IpRates::default();
    for (entity, values) in stored {
        let (Some(name), Some(rate)) = (&entity.ip, values.get(CONNECTION_CREATION_RATE)) else { continue };
        match name {
            None => out.default = Some(*rate),
            Some(name) => {
                if let Some(ip) = resolve_ip(name) {
                    out.by_ip.insert(ip, *rate);
                }
            }
        }
    }
    out
}

type Stamp = (u64, u64, u64, i64, i64);

fn stamp(dir: &Path) -> Option<Stamp> {
    let m = std::fs::symlink_metadata(dir.join(QUOTAS_FILE)).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

impl QuotaManager {
    pub fn open(dir: &Path) -> Result<QuotaManager> {
        let stamp = stamp(dir);
        let stored = read(dir)?;
        let ips = ip_rates(&stored);
        Ok(QuotaManager {
            dir: dir.to_path_buf(),
            any: AtomicBool::new(!stored.is_empty()),
            stored: RwLock::new(stored),
            stamp: Mutex::new(stamp),
            checked_ms: AtomicU64::new(0),
            sensors: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
            ips: RwLock::new(ips),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Adopt `quotas` (this server just wrote them, under the admin lock).
    pub fn adopt(&self, quotas: Stored) {
        *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) = stamp(&self.dir);
        self.any.store(!quotas.is_empty(), Ordering::SeqCst);
        *self.ips.write().unwrap_or_else(|e| e.into_inner()) = ip_rates(&quotas);
        *self.stored.write().unwrap_or_else(|e| e.into_inner()) = quotas;
    }

    /// The quotas in force, re-read first if the file changed.
    pub fn current(&self) -> Stored {
        self.refresh();
        self.stored.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Re-read the file if another process changed it (at most one `stat` a second).
    fn refresh(&self) {
        let now = self.now_ms();
        let last = self.checked_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < RECHECK_MS {
            return;
        }
        self.checked_ms.store(now.max(1), Ordering::Relaxed);
        let current = stamp(&self.dir);
        let mut seen = self.stamp.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == current {
            return;
        }
        match read(&self.dir) {
            Ok(quotas) => {
                self.any.store(!quotas.is_empty(), Ordering::SeqCst);
                *self.ips.write().unwrap_or_else(|e| e.into_inner()) = ip_rates(&quotas);
                *self.stored.write().unwrap_or_else(|e| e.into_inner()) = quotas;
            }
            Err(e) => ::log::error!(target: super::LOG_TARGET, "keeping the client quotas read before: {e}"),
        }
        *seen = current;
    }

    /// The quota for `kind` of `user` and `client_id` and the sensor it is counted in, in Kafka's
    /// precedence order; None: no quota applies.
    fn resolve(&self, kind: Kind, user: &str, client_id: &str) -> Option<(f64, SensorKey)> {
        let stored = self.stored.read().unwrap_or_else(|e| e.into_inner());
        let (u, c) = (Some(user.to_string()), Some(client_id.to_string()));
        let entity = |user, client_id| Entity { user, client_id, ip: None };
        let order = [
            entity(Some(u.clone()), Some(c.clone())),
            entity(Some(u.clone()), Some(None)),
            entity(Some(u.clone()), None),
            entity(Some(None), Some(c.clone())),
            entity(Some(None), Some(None)),
            entity(Some(None), None),
            entity(None, Some(c.clone())),
            entity(None, Some(None)),
        ];
        order.into_iter().find_map(|entity| {
            let has = (entity.user.is_some(), entity.client_id.is_some());
            let quota = *stored.get(&entity)?.get(kind.key())?;
            let key = (kind, has.0.then(|| user.to_string()), has.1.then(|| client_id.to_string()));
            Some((quota, key))
        })
    }

    /// Wait while the quota of `user`/`client_id` for `kind` is throttled (Kafka's muted channel).
    pub async fn wait_turn(&self, kind: Kind, user: &str, client_id: &str) {
        if !self.enabled() {
            return;
        }
        let Some((_, key)) = self.resolve(kind, user, client_id) else { return };
        let until = self.sensors.lock().unwrap_or_else(|e| e.into_inner()).get(&key).and_then(|s| s.throttled_until);
        if let Some(until) = until {
            tokio::time::sleep_until(until.into()).await;
        }
    }

    /// The `connection_creation_rate` of `ip` (its own, else the `<default>` ip's); None:
    /// unlimited (with no quota at all, one atomic load).
    pub fn connection_rate(&self, ip: IpAddr) -> Option<f64> {
        if !self.enabled() {
            return None;
        }
        let ips = self.ips.read().unwrap_or_else(|e| e.into_inner());
        ips.by_ip.get(&ip).copied().or(ips.default)
    }

    /// Any quota is set (after the once-a-second check of the file).
    fn enabled(&self) -> bool {
        self.refresh();
        self.any.load(Ordering::SeqCst)
    }

    /// The most bytes one answer may carry under the quota (Kafka's `getMaxValueInQuotaWindow`:
    /// the quota over all windows but one), so that a client with a quota below its fetch size
    /// still makes progress; None: no quota applies.
    pub fn max_bytes(&self, kind: Kind, user: &str, client_id: &str) -> Option<usize> {
        if !self.enabled() {
            return None;
        }
        let (quota, _) = self.resolve(kind, user, client_id)?;
        Some((quota * ((WINDOWS as u64 - 1) * WINDOW_MS) as f64 / 1000.0).min(usize::MAX as f64) as usize)
    }

    /// Record `bytes` for `kind` of `user`/`client_id`; the throttle time in ms (0: within quota).
    pub fn record(&self, kind: Kind, user: &str, client_id: &str, bytes: usize) -> i32 {
        if !self.enabled() {
            return 0;
        }
        let Some((quota, key)) = self.resolve(kind, user, client_id) else { return 0 };
        let now = self.now_ms();
        let mut sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        if sensors.len() >= MAX_SENSORS && !sensors.contains_key(&key) {
            // Clients that came and went (a new client id per connection under a default
            // quota): Kafka expires their sensors after an hour idle; here once past the bound.
            let at = Instant::now();
            sensors.retain(|_, s| {
                s.purge(now);
                !s.samples.is_empty() || s.throttled_until.is_some_and(|until| until > at)
            });
        }
        let sensor = sensors.entry(key).or_default();
        sensor.record(now, bytes as f64);
        let throttle = sensor.throttle_ms(now, quota).min(i32::MAX as u64);
        if throttle > 0 {
            sensor.throttled_until = Some(Instant::now() + Duration::from_millis(throttle));
        }
        throttle as i32
    }

    /// Take back bytes recorded for an answer that was not sent (Kafka's `unrecordQuotaSensor`:
    /// a throttled Fetch answers with no records).
    pub fn unrecord(&self, kind: Kind, user: &str, client_id: &str, bytes: usize) {
        let Some((_, key)) = self.resolve(kind, user, client_id) else { return };
        let now = self.now_ms();
        if let Some(s) = self.sensors.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&key) {
            s.record(now, -(bytes as f64));
        }
    }
}

/// The quota user of a principal (`User:alice` -> `alice`; Kafka's `KafkaPrincipal.getName`).
pub fn user_of(principal: &str) -> &str {
    principal.split_once(':').map_or(principal, |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_time_brings_the_rate_back_to_the_quota() {
        let mut s = Sensor::default();
        s.record(0, 20_000.0);
        // 20,000 bytes over the 10 s minimum window: 2,000 B/s against a 1,000 B/s quota.
        assert_eq!(s.throttle_ms(0, 1000.0), 10_000);
        assert_eq!(s.throttle_ms(0, 2000.0), 0);
    }

    fn named(user: Option<Option<&str>>, client_id: Option<Option<&str>>) -> Entity {
        let own = |p: Option<Option<&str>>| p.map(|n| n.map(str::to_string));
        Entity { user: own(user), client_id: own(client_id), ip: None }
    }

    /// Kafka's precedence: the most specific entity with the key wins, and a default's sensor is
    /// each name's own.
    #[test]
    fn the_most_specific_quota_applies() {
        let dir = tempfile::tempdir().unwrap();
        let q = QuotaManager::open(dir.path()).unwrap();
        assert_eq!(q.resolve(Kind::Produce, "alice", "app"), None);
        let mut stored = Stored::new();
        let rate = |v: f64| [(PRODUCER_BYTE_RATE.to_string(), v)].into_iter().collect();
        stored.insert(named(None, Some(None)), rate(8.0));
        stored.insert(named(Some(None), None), rate(6.0));
        stored.insert(named(Some(Some("alice")), None), rate(3.0));
        stored.insert(named(Some(Some("alice")), Some(Some("app"))), rate(1.0));
        q.adopt(stored);
        let key = |u: Option<&str>, c: Option<&str>| (Kind::Produce, u.map(str::to_string), c.map(str::to_string));
        assert_eq!(q.resolve(Kind::Produce, "alice", "app"), Some((1.0, key(Some("alice"), Some("app")))));
        assert_eq!(q.resolve(Kind::Produce, "alice", "other"), Some((3.0, key(Some("alice"), None))));
        assert_eq!(q.resolve(Kind::Produce, "bob", "app"), Some((6.0, key(Some("bob"), None))));
        assert_eq!(q.resolve(Kind::Fetch, "alice", "app"), None, "no consumer_byte_rate anywhere");
    }
}
