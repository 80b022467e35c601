//! Client quotas of a data directory (Kafka's quota configs of `/config/users/<user>`,
//! `/config/users/<user>/clients/<client-id>`, `/config/clients/<client-id>` and their
//! `<default>`s, and `/config/ips/<ip>` and its `<default>`): what they are, how Kafka validates and filters them, and the file that keeps
//! them (`files::QUOTAS_FILE`), rewritten atomically under the admin lock:
//!
//! {"version": 1, "quotas": [{"entity": {"user": "alice", "client-id": null},
//!                            "values": {"producer_byte_rate": 1048576}}]}
//!
//! An entity names its types, each with a name or null (the type's default). The server enforces
//! them (`server/quotas.rs`); `kafkalite quotas` and Describe/AlterClientQuotas read and change
//! them here.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::storage::error::{Error, Result};
use crate::storage::files::QUOTAS_FILE;

/// Kafka's quota entity types (`ClientQuotaEntity`).
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// Kafka's quota keys (`QuotaConfigs`) kafkalite enforces: bytes per second (longs)...
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// ...and the percentage of one request handler's time (a double: 0.5 is half a percent).
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// Kafka's one quota of an ip entity (KIP-612): connections accepted per second from the address.
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";
/// Kafka's keys kafkalite refuses rather than storing a quota it would not enforce.
const NOT_ENFORCED: [&str; 1] = ["controller_mutation_rate"];

/// One quota entity: a user and/or a client id, or an ip (alone, as Kafka), each `Some(name)`
/// or `None` (the default).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entity {
    pub user: Option<Option<String>>,
    pub client_id: Option<Option<String>>,
    pub ip: Option<Option<String>>,
}

impl Entity {
    /// (type, name) pairs as Kafka's protocol lists them (None: the default).
    pub fn parts(&self) -> Vec<(&'static str, Option<&str>)> {
        let mut out = Vec::new();
        if let Some(u) = &self.user {
            out.push((USER, u.as_deref()));
        }
        if let Some(c) = &self.client_id {
            out.push((CLIENT_ID, c.as_deref()));
        }
        if let Some(ip) = &self.ip {
            out.push((IP, ip.as_deref()));
        }
        out
    }

    /// The entity Kafka's protocol names, or why Kafka refuses it (`ClientQuotaControlManager`).
    pub fn from_parts<'a>(
        parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> std::result::Result<Entity, String> {
        let mut e = Entity::default();
        let mut any = false;
        for (kind, name) in parts {
            any = true;
            let slot = match kind {
                USER => &mut e.user,
                CLIENT_ID => &mut e.client_id,
                IP => &mut e.ip,
                other => return Err(format!("Unhandled client quota entity type: {other}")),
            };
            if slot.is_some() {
                return Err(format!("Invalid client quota entity, duplicate entity entry {kind}"));
            }
            if name == Some("") {
                return Err(format!("Empty {kind} not supported (the default entity has no name)"));
            }
            *slot = Some(name.map(str::to_string));
        }
        if !any {
            return Err("Invalid empty client quota entity".into());
        }
        if e.ip.is_some() && (e.user.is_some() || e.client_id.is_some()) {
            return Err(
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId".into()
            );
        }
        if let Some(Some(host)) = &e.ip {
            if resolve_ip(host).is_none() {
                return Err(format!("{host} is not a valid IP or resolvable host."));
            }
        }
        Ok(e)
    }

    /// Why Kafka would refuse `value` for `key` on this entity, if it would: an ip entity takes
    /// only `connection_creation_rate` (an INT), the others only the byte rates (`invalid_value`).
    pub fn invalid_value(&self, key: &str, value: f64) -> Option<String> {
        if self.ip.is_none() {
            return invalid_value(key, value);
        }
        if key != CONNECTION_CREATION_RATE {
            return Some(format!("Invalid configuration key {key}"));
        }
        if value <= 0.0 || value.is_nan() {
            return Some(format!("Quota {key} must be greater than 0"));
        }
        if value > i32::MAX as f64 {
            return Some(format!("Proposed value for {key} is too large for an INT."));
        }
        match long_value(value) {
            // 1e-300 is within Kafka's tolerance of 0, and would be stored as 0.
            0 => Some(format!("Quota {key} must be greater than 0")),
            n if (value - n as f64).abs() > 1e-6 => Some(format!("{key} cannot be a fractional value.")),
            _ => None,
        }
    }
}

/// The address an ip entity's name stands for (Kafka's `InetAddress.getByName`: a literal, or a
/// host name resolved).
pub fn resolve_ip(name: &str) -> Option<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    if let Ok(ip) = name.parse() {
        return Some(ip);
    }
    (name, 0).to_socket_addrs().ok()?.next().map(|a| a.ip())
}

/// Why Kafka would refuse `value` for `key`, if it would.
pub fn invalid_value(key: &str, value: f64) -> Option<String> {
    if NOT_ENFORCED.contains(&key) {
        return Some(format!(
            "{key} is not enforced by kafkalite serve; only {PRODUCER_BYTE_RATE}, {CONSUMER_BYTE_RATE} and \
             {REQUEST_PERCENTAGE} are"
        ));
    }
    if key != PRODUCER_BYTE_RATE && key != CONSUMER_BYTE_RATE && key != REQUEST_PERCENTAGE {
        return Some(format!("Invalid configuration key {key}"));
    }
    if value <= 0.0 || value.is_nan() {
        return Some(format!("Quota {key} must be greater than 0"));
    }
    if key == REQUEST_PERCENTAGE {
        // Kafka's DOUBLE quota: any positive number; the file (JSON) holds no infinity.
        return (!value.is_finite()).then(|| format!("Quota {key} must be a finite number"));
    }
    // Kafka's byte rates are longs.
    if value > i64::MAX as f64 {
        return Some(format!("Proposed value for {key} is too large for a LONG."));
    }
    // Kafka's tolerance: within 1e-6 of a long (99.9999999 is 100; 100.5 is refused).
    if (value - long_value(value) as f64).abs() > 1e-6 {
        return Some(format!("{key} cannot be a fractional value."));
    }
    // 1e-300 is within the tolerance of 0, and would be stored as 0, a quota no server
    // starts with.
    if long_value(value) < 1 {
        return Some(format!("Quota {key} must be greater than 0"));
    }
    None
}

/// The long a valid byte rate is stored and enforced as (Kafka's are longs; `invalid_value`
/// lets a value within 1e-6 of one through).
fn long_value(value: f64) -> i64 {
    value.round() as i64
}

/// The value a valid quota of `key` is stored and enforced as: byte rates as longs, the
/// request percentage as given.
pub fn stored_value(key: &str, value: f64) -> f64 {
    if key == REQUEST_PERCENTAGE {
        value
    } else {
        long_value(value) as f64
    }
}

/// Every entity's quotas.
pub type Quotas = BTreeMap<Entity, BTreeMap<String, f64>>;

/// A DescribeClientQuotas filter component (Kafka's `ClientQuotaFilterComponent`).
pub enum Match {
    Exact(String),
    Default,
    /// Any name or the default.
    Specified,
}

/// Kafka's filter semantics: every component's type present and matching; with `strict`, no
/// other type either.
pub fn matches(entity: &Entity, components: &[(&str, Match)], strict: bool) -> bool {
    let parts = entity.parts();
    let all = components.iter().all(|(kind, m)| match parts.iter().find(|(k, _)| k == kind) {
        None => false,
        Some((_, name)) => match m {
            Match::Exact(want) => *name == Some(want.as_str()),
            Match::Default => name.is_none(),
            Match::Specified => true,
        },
    });
    all && (!strict || parts.iter().all(|(k, _)| components.iter().any(|(kind, _)| kind == k)))
}

fn damaged(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::CorruptMetadata(format!(
        "the client quota file {} is damaged ({what}); restore it from a backup, or delete it and set the quotas again",
        path.display()
    ))
}

fn name_from_json(v: Option<&Value>) -> Option<Option<Option<String>>> {
    match v {
        None => Some(None),
        Some(Value::Null) => Some(Some(None)),
        Some(Value::String(s)) if !s.is_empty() => Some(Some(Some(s.clone()))),
        Some(_) => None,
    }
}

/// The quota file, parsed and checked; empty when there is none.
pub fn read(dir: &Path) -> Result<Quotas> {
    let path = dir.join(QUOTAS_FILE);
    // Bytes, not a String: a file that is not UTF-8 is damaged, said as such below.
    let Some(text) = crate::storage::nofollow::read_if_exists(&path, "the client quota file")? else {
        return Ok(Quotas::new());
    };
    let v: Value = serde_json::from_slice(&text).map_err(|e| damaged(&path, e))?;
    if v.get("version") != Some(&json!(1)) {
        return Err(damaged(&path, "no version 1"));
    }
    let list = v.get("quotas").and_then(Value::as_array).ok_or_else(|| damaged(&path, "no quotas list"))?;
    let mut out = Quotas::new();
    for q in list {
        let e =
            q.get("entity").and_then(Value::as_object).ok_or_else(|| damaged(&path, "an entry without an entity"))?;
        let bad = || damaged(&path, format!("a bad entity {e:?}"));
        let entity = Entity {
            user: name_from_json(e.get(USER)).ok_or_else(bad)?,
            client_id: name_from_json(e.get(CLIENT_ID)).ok_or_else(bad)?,
            ip: name_from_json(e.get(IP)).ok_or_else(bad)?,
        };
        if entity == Entity::default() || e.keys().any(|k| k != USER && k != CLIENT_ID && k != IP) {
            return Err(bad());
        }
        let values =
            q.get("values").and_then(Value::as_object).ok_or_else(|| damaged(&path, "an entry without values"))?;
        let mut parsed = BTreeMap::new();
        for (k, v) in values {
            let v = v.as_f64().ok_or_else(|| damaged(&path, format!("a value of {k} that is not a number")))?;
            if let Some(why) = entity.invalid_value(k, v) {
                return Err(damaged(&path, why));
            }
            parsed.insert(k.clone(), v);
        }
        out.insert(entity, parsed);
    }
    Ok(out)
}

/// A stored value as the file writes it: a byte rate as an integer, the percentage as a double.
fn number(key: &str, value: f64) -> Value {
    if key == REQUEST_PERCENTAGE {
        json!(value)
    } else {
        json!(long_value(value))
    }
}

fn to_json(quotas: &Quotas) -> Value {
    let list: Vec<Value> = quotas
        .iter()
        .map(|(entity, values)| {
            let e: Map<String, Value> =
                entity.parts().into_iter().map(|(k, n)| (k.to_string(), n.map_or(Value::Null, |n| json!(n)))).collect();
            let v: Map<String, Value> = values.iter().map(|(k, v)| (k.clone(), number(k, *v))).collect();
            json!({"entity": e, "values": v})
        })
        .collect();
    json!({"version": 1, "quotas": list})
}

/// One change of an entity's quota: `Some(value)` sets it, `None` removes it.
pub type Change = (Entity, String, Option<f64>);

/// Re-read the file under the admin lock, apply `changes` (each already validated), and write
/// it when anything changed; returns the quotas now in force.
pub fn alter(dir: &Path, changes: &[Change]) -> Result<Quotas> {
    let lock = crate::storage::datadir::admin_lock(dir)?;
    let mut quotas = read(dir)?;
    let before = quotas.clone();
    for (entity, key, value) in changes {
        match value {
            Some(v) => {
                quotas.entry(entity.clone()).or_default().insert(key.clone(), stored_value(key, *v));
            }
            None => {
                if let Some(values) = quotas.get_mut(entity) {
                    values.remove(key);
                    if values.is_empty() {
                        quotas.remove(entity);
                    }
                }
            }
        }
    }
    if quotas != before {
        let text = serde_json::to_string_pretty(&to_json(&quotas))
            .map_err(|e| Error::config(format!("cannot encode the client quota file: {e}")))?;
        crate::storage::checkpoint::write_atomically(dir, QUOTAS_FILE, text.as_bytes())?;
    }
    drop(lock);
    Ok(quotas)
}
