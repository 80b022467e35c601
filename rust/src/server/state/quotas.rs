//! Enforcing client quotas (Kafka's `ClientQuotaManager`): each Produce's record bytes, each
//! Fetch's response record bytes, and each request's time on the server (`request_time`, as a
//! percentage of one worker: Kafka's `ClientRequestQuotaManager`) are recorded against the quota
//! that applies to the request's user and client id, found in Kafka's precedence order (`/config/users/<user>/clients/<client-id>`,
//! `.../clients/<default>`, `/config/users/<user>`, then `/config/users/<default>/...` likewise,
//! then `/config/clients/<client-id>`, `/config/clients/<default>`). The rate is Kafka's sampled
//! `Rate`: `quota.window.num` (11) windows of `quota.window.size.seconds` (1 s), measured over
//! at least all but one of them. Past the quota, the answer says by `throttle_time_ms` how long
//! to bring the rate back to it (`QuotaUtils.throttleTime`: (rate - quota) / quota x window; at
//! most one window for the request quota, as Kafka bounds it), and that entity's next request waits out that time before it is served, as Kafka mutes the
//! channel (clients back off themselves; this holds to it those that do not).
//!
//! The quotas are read from the data directory (`crate::coordination::quotas`) at start, adopted at once when
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

use crate::coordination::quotas::{
    read, resolve_ip, Entity, Quotas as Stored, CONNECTION_CREATION_RATE, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
};
use crate::storage::error::Result;
use crate::storage::files::QUOTAS_FILE;

/// Kafka's `quota.window.num` and `quota.window.size.seconds` defaults.
const WINDOWS: usize = 11;
const WINDOW_MS: u64 = 1000;
/// How often the file is checked for another process's changes.
const RECHECK_MS: u64 = 1000;
/// Sensors kept before those with no bytes in the window are first dropped.
const MAX_SENSORS: usize = 10_000;

/// Which quota a request is recorded against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Produce,
    Fetch,
    /// Request time, recorded in percent-seconds (Kafka's `nanosToPercentage`).
    Request,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Produce => PRODUCER_BYTE_RATE,
            Kind::Fetch => CONSUMER_BYTE_RATE,
            Kind::Request => REQUEST_PERCENTAGE,
        }
    }

    /// Kafka's `ClientRequestQuotaManager.maxThrottleTimeMs`: one window; byte rates unbounded.
    fn max_throttle_ms(self) -> u64 {
        match self {
            Kind::Request => WINDOW_MS,
            Kind::Produce | Kind::Fetch => u64::MAX,
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
    /// Any request_percentage: without one, no request's time is measured.
    any_request: AtomicBool,
    /// The file's identity when `stored` was read, and when it was last checked.
    stamp: Mutex<Option<Stamp>>,
    checked_ms: AtomicU64,
    sensors: Mutex<Sensors>,
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

/// Every entity's sensor, and when the next sweep of the idle ones is due.
struct Sensors {
    map: HashMap<SensorKey, Sensor>,
    /// The count at which idle sensors are next dropped: twice what a sweep left, at least
    /// MAX_SENSORS, so that a new sensor costs amortized O(1) however many are busy (a new
    /// client id per request under a default quota would otherwise scan them all each time,
    /// under the lock every quota'd request takes).
    sweep_at: usize,
    /// Sweeps done (the tests' measure of the amortization).
    sweeps: usize,
}

impl Default for Sensors {
    fn default() -> Sensors {
        Sensors { map: HashMap::new(), sweep_at: MAX_SENSORS, sweeps: 0 }
    }
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
            any_request: AtomicBool::new(has_request_quota(&stored)),
            stored: RwLock::new(stored),
            stamp: Mutex::new(stamp),
            checked_ms: AtomicU64::new(0),
            sensors: Mutex::new(Sensors::default()),
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
        self.set(quotas);
    }

    fn set(&self, quotas: Stored) {
        self.any.store(!quotas.is_empty(), Ordering::SeqCst);
        self.any_request.store(has_request_quota(&quotas), Ordering::SeqCst);
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
            Ok(quotas) => self.set(quotas),
            Err(e) => {
                ::log::error!(target: crate::server::log_target::LOG_TARGET, "keeping the client quotas read before: {e}")
            }
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
        let until =
            self.sensors.lock().unwrap_or_else(|e| e.into_inner()).map.get(&key).and_then(|s| s.throttled_until);
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

    /// Whether a request_percentage quota applies to `user`/`client_id`: only then is the
    /// request's time measured (`request_time`).
    pub fn request_quota_applies(&self, user: &str, client_id: &str) -> bool {
        self.enabled()
            && self.any_request.load(Ordering::SeqCst)
            && self.resolve(Kind::Request, user, client_id).is_some()
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
        self.record_value(kind, user, client_id, bytes as f64)
    }

    /// Record `spent` serving a request of `user`/`client_id` against its request_percentage
    /// (Kafka's `nanosToPercentage`: 1 s of one worker is 100); the throttle time in ms.
    pub fn record_time(&self, user: &str, client_id: &str, spent: Duration) -> i32 {
        self.record_value(Kind::Request, user, client_id, spent.as_secs_f64() * 100.0)
    }

    fn record_value(&self, kind: Kind, user: &str, client_id: &str, value: f64) -> i32 {
        if !self.enabled() {
            return 0;
        }
        let Some((quota, key)) = self.resolve(kind, user, client_id) else { return 0 };
        let now = self.now_ms();
        let mut sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        if sensors.map.len() >= sensors.sweep_at && !sensors.map.contains_key(&key) {
            // Clients that came and went (a new client id per connection under a default
            // quota): Kafka expires their sensors after an hour idle; here once past the bound.
            let at = Instant::now();
            sensors.map.retain(|_, s| {
                s.purge(now);
                !s.samples.is_empty() || s.throttled_until.is_some_and(|until| until > at)
            });
            sensors.sweeps += 1;
            sensors.sweep_at = MAX_SENSORS.max(2 * sensors.map.len());
        }
        let sensor = sensors.map.entry(key).or_default();
        sensor.record(now, value);
        let throttle = sensor.throttle_ms(now, quota).min(kind.max_throttle_ms()).min(i32::MAX as u64);
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
        if let Some(s) = self.sensors.lock().unwrap_or_else(|e| e.into_inner()).map.get_mut(&key) {
            s.record(now, -(bytes as f64));
        }
    }
}

fn has_request_quota(quotas: &Stored) -> bool {
    quotas.values().any(|values| values.contains_key(REQUEST_PERCENTAGE))
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

    /// Request time is in percent-seconds against a percentage, and its throttle is bounded by
    /// one window (Kafka's `maxThrottleTimeMs`); byte rates' are not.
    #[test]
    fn request_time_throttles_at_most_one_window() {
        let dir = tempfile::tempdir().unwrap();
        let q = QuotaManager::open(dir.path()).unwrap();
        let mut stored = Stored::new();
        let user = Entity { user: Some(Some("alice".into())), client_id: None, ip: None };
        stored.insert(user, [(REQUEST_PERCENTAGE.to_string(), 1.0)].into_iter().collect());
        q.adopt(stored);
        assert!(q.request_quota_applies("alice", "app"));
        assert!(!q.request_quota_applies("bob", "app"));
        // 50 ms of a worker over the 10 s minimum window: 0.5 %, within 1 %.
        assert_eq!(q.record_time("alice", "app", Duration::from_millis(50)), 0);
        // 2.05 s: 20.5 % against 1 %, far over; bounded to one window.
        assert_eq!(q.record_time("alice", "app", Duration::from_secs(2)), 1000);
        assert_eq!(q.record_time("bob", "app", Duration::from_secs(2)), 0, "no quota applies to bob");
    }

    /// A new client id per request under a default request quota: past MAX_SENSORS busy
    /// sensors, each new one must not sweep them all again (O(n) under the lock every quota'd
    /// request takes: a few cheap requests a second would stall every other client).
    #[test]
    fn new_sensors_past_the_bound_do_not_each_sweep_the_busy_ones() {
        let dir = tempfile::tempdir().unwrap();
        let q = QuotaManager::open(dir.path()).unwrap();
        let mut stored = Stored::new();
        let any_client = Entity { user: None, client_id: Some(None), ip: None };
        stored.insert(any_client, [(REQUEST_PERCENTAGE.to_string(), 1e9)].into_iter().collect());
        q.adopt(stored);
        let clients = 3 * MAX_SENSORS;
        for i in 0..clients {
            q.record_time("", &format!("c{i}"), Duration::from_micros(10));
        }
        let sensors = q.sensors.lock().unwrap();
        assert_eq!(sensors.map.len(), clients, "every one busy in the window: none dropped");
        assert!(sensors.sweeps <= 4, "{} sweeps for {clients} new sensors", sensors.sweeps);
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
