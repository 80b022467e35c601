//! Authorization with Kafka's ACL model, decided as Kafka's `StandardAuthorizer` decides: an ACL
//! binds a resource pattern (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID; LITERAL, with `*` for every
//! name, or PREFIXED) to a principal (`User:<name>`, `User:*` for everyone), a host (an address,
//! or `*`), an operation and ALLOW or DENY. A request is allowed when no matching DENY names its
//! operation (or ALL) and some matching ALLOW names it, ALL, or an operation that implies it
//! (DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS);
//! with no matching ALLOW it is refused (`allow.everyone.if.no.acl.found=false`). `super.users`
//! are allowed everything.
//!
//! When the ACLs are enforced (`Mode`): `--authorizer` always; by default never on a loopback
//! listener, and on any other listener as soon as at least one ACL exists. Whatever the mode,
//! CreateAcls/DescribeAcls/DeleteAcls work (so ACLs can be written before they are enforced).
//! The embedded API never goes through here: the data directory's owner is unrestricted.
//!
//! The ACLs live in `files::ACLS_FILE` in the data directory, JSON readable by its owner only
//! (0600), replaced atomically (temp file, fsync, rename, directory fsync) under the data
//! directory's admin lock, with Kafka's names for every enum:
//!
//! ```text
//! {"version": 1, "acls": [{"resource_type": "TOPIC", "name": "orders-", "pattern_type": "PREFIXED",
//!   "principal": "User:alice", "host": "*", "operation": "READ", "permission_type": "ALLOW"}]}
//! ```
//!
//! It is read at start (a damaged file stops the start) and rewritten by CreateAcls and
//! DeleteAcls, which re-read it under the lock first, so two servers on one directory lose no
//! change. Each server decides on its own copy, re-read before a request is checked whenever
//! the file's identity (device, inode, size, mtime) changed (`refresh`): another server's
//! CreateAcls/DeleteAcls or `kafkalite acls` count from the next request on, without a restart,
//! as the users file does. A file made unreadable or damaged meanwhile keeps the last good copy
//! (with an ERROR line), so a bad edit cannot open or close everything at once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use serde_json::{json, Value};

use crate::storage::error::{Error, Result};
use crate::storage::files::ACLS_FILE;

/// Kafka's `ResourceType` codes.
pub mod resource {
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// Kafka's `PatternType` codes.
pub mod pattern {
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

/// Kafka's `AclOperation` codes.
pub mod op {
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
}

/// Kafka's `AclPermissionType` codes.
pub mod permission {
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// The one name of the cluster resource (Kafka's `kafka-cluster`).
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal resource name and principal/host that match everything.
pub const WILDCARD: &str = "*";
pub const WILDCARD_PRINCIPAL: &str = "User:*";

const RESOURCE_NAMES: &[(i8, &str)] = &[
    (resource::ANY, "ANY"),
    (resource::TOPIC, "TOPIC"),
    (resource::GROUP, "GROUP"),
    (resource::CLUSTER, "CLUSTER"),
    (resource::TRANSACTIONAL_ID, "TRANSACTIONAL_ID"),
    (resource::DELEGATION_TOKEN, "DELEGATION_TOKEN"),
    (resource::USER, "USER"),
];
const PATTERN_NAMES: &[(i8, &str)] =
    &[(pattern::ANY, "ANY"), (pattern::MATCH, "MATCH"), (pattern::LITERAL, "LITERAL"), (pattern::PREFIXED, "PREFIXED")];
const OPERATION_NAMES: &[(i8, &str)] = &[
    (op::ANY, "ANY"),
    (op::ALL, "ALL"),
    (op::READ, "READ"),
    (op::WRITE, "WRITE"),
    (op::CREATE, "CREATE"),
    (op::DELETE, "DELETE"),
    (op::ALTER, "ALTER"),
    (op::DESCRIBE, "DESCRIBE"),
    (op::CLUSTER_ACTION, "CLUSTER_ACTION"),
    (op::DESCRIBE_CONFIGS, "DESCRIBE_CONFIGS"),
    (op::ALTER_CONFIGS, "ALTER_CONFIGS"),
    (op::IDEMPOTENT_WRITE, "IDEMPOTENT_WRITE"),
    (op::CREATE_TOKENS, "CREATE_TOKENS"),
    (op::DESCRIBE_TOKENS, "DESCRIBE_TOKENS"),
];
const PERMISSION_NAMES: &[(i8, &str)] =
    &[(permission::ANY, "ANY"), (permission::DENY, "DENY"), (permission::ALLOW, "ALLOW")];

fn name_of(table: &[(i8, &'static str)], code: i8) -> &'static str {
    table.iter().find(|(c, _)| *c == code).map_or("UNKNOWN", |(_, n)| n)
}

fn code_of(table: &[(i8, &str)], name: &str) -> Option<i8> {
    table.iter().find(|(_, n)| *n == name).map(|(c, _)| *c)
}

/// Kafka's name of an operation (`AclOperation`), for log lines.
pub fn operation_name(code: i8) -> &'static str {
    name_of(OPERATION_NAMES, code)
}

/// Kafka's name of a resource type, for log lines.
pub fn resource_name(code: i8) -> &'static str {
    name_of(RESOURCE_NAMES, code)
}

/// Operations an ALLOW of another operation grants too (Kafka's `AclEntry` implications).
fn implies(granted: i8, wanted: i8) -> bool {
    granted == op::ALL
        || granted == wanted
        || (wanted == op::DESCRIBE && [op::READ, op::WRITE, op::DELETE, op::ALTER].contains(&granted))
        || (wanted == op::DESCRIBE_CONFIGS && granted == op::ALTER_CONFIGS)
}

/// One ACL (Kafka's `AclBinding`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Acl {
    pub resource_type: i8,
    pub name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl Acl {
    /// Why Kafka would refuse to create it (`AclControlManager.validateNewAcl`), if it would.
    pub fn invalid(&self) -> Option<String> {
        let known = |table: &[(i8, &str)], c: i8| table.iter().any(|(k, _)| *k == c);
        if !known(RESOURCE_NAMES, self.resource_type) || self.resource_type == resource::ANY {
            return Some(format!("invalid resource type {}", self.resource_type));
        }
        if self.pattern_type != pattern::LITERAL && self.pattern_type != pattern::PREFIXED {
            return Some(format!("invalid pattern type {} (LITERAL or PREFIXED)", self.pattern_type));
        }
        if !known(OPERATION_NAMES, self.operation) || self.operation == op::ANY {
            return Some(format!("invalid operation {}", self.operation));
        }
        if self.permission != permission::ALLOW && self.permission != permission::DENY {
            return Some(format!("invalid permission type {}", self.permission));
        }
        if self.name.is_empty() {
            return Some("the resource name is empty".into());
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return Some(format!("the principal {:?} is not TYPE:NAME (e.g. User:alice)", self.principal)),
        }
        if self.host.is_empty() {
            return Some("the host is empty (an address, or * for any)".into());
        }
        if self.resource_type == resource::CLUSTER && self.name != CLUSTER_NAME {
            return Some(format!("the cluster resource is named {CLUSTER_NAME}, not {:?}", self.name));
        }
        None
    }

    /// Whether this ACL's resource pattern covers `name` (`StandardAuthorizerData`'s matching).
    fn covers(&self, resource_type: i8, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                pattern::LITERAL => self.name == name || self.name == WILDCARD,
                pattern::PREFIXED => name.starts_with(&self.name),
                _ => false,
            }
    }

    fn to_json(&self) -> Value {
        json!({
            "resource_type": name_of(RESOURCE_NAMES, self.resource_type),
            "name": self.name,
            "pattern_type": name_of(PATTERN_NAMES, self.pattern_type),
            "principal": self.principal,
            "host": self.host,
            "operation": name_of(OPERATION_NAMES, self.operation),
            "permission_type": name_of(PERMISSION_NAMES, self.permission),
        })
    }

    fn from_json(v: &Value) -> Option<Acl> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        let acl = Acl {
            resource_type: code_of(RESOURCE_NAMES, s("resource_type")?)?,
            name: s("name")?.to_string(),
            pattern_type: code_of(PATTERN_NAMES, s("pattern_type")?)?,
            principal: s("principal")?.to_string(),
            host: s("host")?.to_string(),
            operation: code_of(OPERATION_NAMES, s("operation")?)?,
            permission: code_of(PERMISSION_NAMES, s("permission_type")?)?,
        };
        acl.invalid().is_none().then_some(acl)
    }
}

/// A DescribeAcls/DeleteAcls filter (Kafka's `AclBindingFilter`): None and ANY match anything.
#[derive(Clone, Debug)]
pub struct AclFilter {
    pub resource_type: i8,
    pub name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    /// Why Kafka refuses the filter, if it does (an UNKNOWN, out-of-range value).
    pub fn invalid(&self) -> Option<String> {
        let known = |table: &[(i8, &str)], c: i8| table.iter().any(|(k, _)| *k == c);
        if !known(RESOURCE_NAMES, self.resource_type) {
            return Some(format!("invalid resource type filter {}", self.resource_type));
        }
        if !known(PATTERN_NAMES, self.pattern_type) {
            return Some(format!("invalid pattern type filter {}", self.pattern_type));
        }
        if !known(OPERATION_NAMES, self.operation) {
            return Some(format!("invalid operation filter {}", self.operation));
        }
        if !known(PERMISSION_NAMES, self.permission) {
            return Some(format!("invalid permission type filter {}", self.permission));
        }
        None
    }

    /// `AclBindingFilter.matches`: the resource pattern filter (MATCH: every pattern that would
    /// cover the named resource), then the entry filter.
    pub fn matches(&self, acl: &Acl) -> bool {
        if self.resource_type != resource::ANY && self.resource_type != acl.resource_type {
            return false;
        }
        let pattern_ok = match (self.pattern_type, &self.name) {
            (pattern::ANY, None) | (pattern::MATCH, None) => true,
            (pattern::ANY, Some(name)) => *name == acl.name,
            (pattern::MATCH, Some(name)) => match acl.pattern_type {
                pattern::LITERAL => *name == acl.name || acl.name == WILDCARD,
                pattern::PREFIXED => name.starts_with(&acl.name),
                _ => false,
            },
            (p, name) => p == acl.pattern_type && name.as_ref().is_none_or(|n| *n == acl.name),
        };
        pattern_ok
            && self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == op::ANY || self.operation == acl.operation)
            && (self.permission == permission::ANY || self.permission == acl.permission)
    }
}

/// Who sends a request: Kafka's principal and the client's address (no port, no slash).
#[derive(Clone, Debug)]
pub struct Who {
    pub principal: String,
    pub host: String,
}

/// Who a connection is for the ACLs: its principal (its SASL session's, `principal.rs`:
/// `User:<scram user>`, `User:<certificate subject>` or `User:ANONYMOUS`) and host; `peer` is
/// the connection's "/<ip>". The one place authorization reads a connection's identity.
pub fn who(principal: &str, peer: &str) -> Who {
    Who { principal: principal.to_string(), host: peer.trim_start_matches('/').to_string() }
}

/// When the ACLs are enforced (`kafkalite serve --authorizer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The default: off on a loopback listener; on elsewhere once any ACL exists.
    Auto,
    /// `--authorizer`: always on (no ACL: only super users may do anything).
    On,
}

/// The ACLs of a data directory and the server's authorization settings.
pub struct Authorizer {
    dir: PathBuf,
    acls: RwLock<Vec<Acl>>,
    /// The identity of the file `acls` was read from (None: there was no file).
    stamp: Mutex<Option<Stamp>>,
    /// Enforced now, whatever the ACLs (`Mode::On`), or once any exists (`Mode::Auto` off loopback).
    always: bool,
    when_any: bool,
    /// `super.users`: principals allowed everything.
    super_users: BTreeSet<String>,
}

/// `super.users` as Kafka's `StandardAuthorizer.getConfiguredSuperUsers` reads them: each entry
/// trimmed (`User:ops; User:admin` names two), empty ones skipped, and each a principal
/// (`SecurityUtils.parseKafkaPrincipal`: TYPE:NAME, both non-empty), else the start fails.
fn super_principals(given: &[String]) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for p in given.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        match p.split_once(':') {
            Some((kind, name))
                if !kind.is_empty() && !kind.contains(char::is_whitespace) && !name.trim().is_empty() =>
            {
                out.insert(p.to_string());
            }
            _ => return Err(Error::config(format!("super user {p:?} is not a principal such as User:alice"))),
        }
    }
    Ok(out)
}

impl Authorizer {
    /// Read the data directory's ACLs; `loopback`: the listener's address is loopback.
    pub fn open(dir: &Path, mode: Mode, loopback: bool, super_users: &[String]) -> Result<Authorizer> {
        let super_users = super_principals(super_users)?;
        // The stamp before the content: a change in between is seen (and read) again next time.
        let stamp = stamp(dir);
        Ok(Authorizer {
            dir: dir.to_path_buf(),
            acls: RwLock::new(read(dir)?),
            stamp: Mutex::new(stamp),
            always: mode == Mode::On,
            when_any: mode == Mode::Auto && !loopback,
            super_users,
        })
    }

    fn current(&self) -> std::sync::RwLockReadGuard<'_, Vec<Acl>> {
        // The vector is only ever replaced whole: a panic cannot leave it half-updated.
        self.acls.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Adopt the ACL file again if it changed since it was last read (another process wrote it).
    /// One `stat` when it did not.
    pub fn refresh(&self) {
        let now = stamp(&self.dir);
        let mut seen = self.stamp.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == now {
            return;
        }
        match read(&self.dir) {
            Ok(acls) => *self.acls.write().unwrap_or_else(|e| e.into_inner()) = acls,
            Err(e) => ::log::error!(target: crate::server::log_target::LOG_TARGET, "keeping the ACLs read before: {e}"),
        }
        *seen = now;
    }

    /// Whether requests are checked now.
    pub fn enforced(&self) -> bool {
        self.always || (self.when_any && !self.current().is_empty())
    }

    /// StandardAuthorizer's decision for `who` doing `operation` on the named resource.
    pub fn allows(&self, who: &Who, operation: i8, resource_type: i8, name: &str) -> bool {
        if !self.enforced() || self.super_users.contains(&who.principal) {
            return true;
        }
        let acls = self.current();
        let mut allowed = false;
        for acl in acls.iter().filter(|a| a.covers(resource_type, name)) {
            if !(acl.principal == who.principal || acl.principal == WILDCARD_PRINCIPAL)
                || !(acl.host == WILDCARD || acl.host == who.host)
            {
                continue;
            }
            match acl.permission {
                // A DENY counts only for its own operation or ALL: DENY READ leaves DESCRIBE.
                permission::DENY if acl.operation == op::ALL || acl.operation == operation => return false,
                permission::ALLOW if implies(acl.operation, operation) => allowed = true,
                _ => {}
            }
        }
        allowed
    }

    /// Kafka's `authorizeByResourceType`: whether some ALLOW lets `who` do `operation` on some
    /// resource of this type (no DENY of every name stops it). InitProducerId without a
    /// transactional id takes WRITE on any topic for IDEMPOTENT_WRITE.
    pub fn allows_some(&self, who: &Who, operation: i8, resource_type: i8) -> bool {
        if !self.enforced() || self.super_users.contains(&who.principal) {
            return true;
        }
        let acls = self.current();
        let mine = |a: &&Acl| {
            a.resource_type == resource_type
                && (a.principal == who.principal || a.principal == WILDCARD_PRINCIPAL)
                && (a.host == WILDCARD || a.host == who.host)
        };
        let denied_everywhere = acls.iter().filter(mine).any(|a| {
            a.permission == permission::DENY
                && (a.operation == op::ALL || a.operation == operation)
                && ((a.pattern_type == pattern::LITERAL && a.name == WILDCARD)
                    || a.pattern_type == pattern::PREFIXED && a.name.is_empty())
        });
        !denied_everywhere
            && acls.iter().filter(mine).any(|a| a.permission == permission::ALLOW && implies(a.operation, operation))
    }

    /// The ACLs `filter` matches.
    pub fn describe(&self, filter: &AclFilter) -> Vec<Acl> {
        self.current().iter().filter(|a| filter.matches(a)).cloned().collect()
    }

    /// Add `new` (ones already present stay once), durably, before they count.
    pub fn create(&self, new: &[Acl]) -> Result<()> {
        self.update(|acls| {
            for acl in new {
                if !acls.contains(acl) {
                    acls.push(acl.clone());
                }
            }
        })
    }

    /// Remove what each filter matches, durably; returns each filter's removed ACLs.
    pub fn delete(&self, filters: &[AclFilter]) -> Result<Vec<Vec<Acl>>> {
        self.update(|acls| {
            let removed: Vec<Vec<Acl>> =
                filters.iter().map(|f| acls.iter().filter(|a| f.matches(a)).cloned().collect()).collect();
            acls.retain(|a| !filters.iter().any(|f| f.matches(a)));
            removed
        })
    }

    /// Re-read the file under the admin lock, change it, write it when it changed, then adopt it.
    fn update<T>(&self, change: impl FnOnce(&mut Vec<Acl>) -> T) -> Result<T> {
        let lock = crate::storage::datadir::admin_lock(&self.dir)?;
        let mut acls = read(&self.dir)?;
        let before = acls.clone();
        let out = change(&mut acls);
        if acls != before {
            let list: Vec<Value> = acls.iter().map(Acl::to_json).collect();
            let text = serde_json::to_string_pretty(&json!({"version": 1, "acls": list}))
                .map_err(|e| Error::config(format!("cannot encode the ACL file: {e}")))?;
            crate::storage::checkpoint::write_private_atomically(&self.dir, ACLS_FILE, text.as_bytes())?;
        }
        // Under the admin lock: nobody else wrote the file since, so this stamp is of `acls`.
        *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) = stamp(&self.dir);
        *self.acls.write().unwrap_or_else(|e| e.into_inner()) = acls;
        drop(lock);
        Ok(out)
    }
}

/// What tells one version of the ACL file from another: it is replaced by rename (a new inode)
/// and edited in place only by hand (a new size or mtime).
type Stamp = crate::storage::checkpoint::FileStamp;

fn stamp(dir: &Path) -> Option<Stamp> {
    crate::storage::checkpoint::file_stamp(&dir.join(ACLS_FILE))
}

fn damaged(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::CorruptMetadata(format!(
        "the ACL file {} is damaged ({what}); restore it from a backup, or delete it and create the ACLs again",
        path.display()
    ))
}

/// The ACL file, parsed and checked; empty when there is none.
fn read(dir: &Path) -> Result<Vec<Acl>> {
    let path = dir.join(ACLS_FILE);
    let Some(text) = crate::storage::nofollow::read_if_exists(&path, "the ACL file")? else { return Ok(Vec::new()) };
    let data: Value = serde_json::from_slice(&text).map_err(|e| damaged(&path, e))?;
    if data.get("version") != Some(&json!(1)) {
        return Err(damaged(&path, "its version is not 1"));
    }
    let list = data.get("acls").and_then(Value::as_array).ok_or_else(|| damaged(&path, "no \"acls\" list"))?;
    list.iter()
        .enumerate()
        .map(|(i, v)| Acl::from_json(v).ok_or_else(|| damaged(&path, format!("ACL #{i} is malformed"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(rt: i8, name: &str, pt: i8, principal: &str, operation: i8, perm: i8) -> Acl {
        Acl {
            resource_type: rt,
            name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission: perm,
        }
    }

    fn who(p: &str) -> Who {
        Who { principal: p.into(), host: "127.0.0.1".into() }
    }

    #[test]
    fn standard_authorizer_rules() {
        let dir = tempfile::tempdir().unwrap();
        let a = Authorizer::open(dir.path(), Mode::On, true, &["User:root".into()]).unwrap();
        let alice = who("User:alice");
        assert!(!a.allows(&alice, op::READ, resource::TOPIC, "orders"), "no ACL: refused");
        a.create(&[acl(resource::TOPIC, "ord", pattern::PREFIXED, "User:alice", op::READ, permission::ALLOW)]).unwrap();
        assert!(a.allows(&alice, op::READ, resource::TOPIC, "orders"));
        assert!(a.allows(&alice, op::DESCRIBE, resource::TOPIC, "orders"), "READ implies DESCRIBE");
        assert!(!a.allows(&alice, op::WRITE, resource::TOPIC, "orders"));
        assert!(!a.allows(&alice, op::READ, resource::TOPIC, "payments"));
        assert!(!a.allows(&who("User:bob"), op::READ, resource::TOPIC, "orders"));
        a.create(&[acl(resource::TOPIC, "orders", pattern::LITERAL, "User:*", op::READ, permission::DENY)]).unwrap();
        assert!(!a.allows(&alice, op::READ, resource::TOPIC, "orders"), "deny wins");
        assert!(a.allows(&alice, op::DESCRIBE, resource::TOPIC, "orders"), "DENY READ is not DENY DESCRIBE");
        assert!(a.allows(&alice, op::READ, resource::TOPIC, "ordersX"));
        assert!(a.allows(&who("User:root"), op::ALTER, resource::CLUSTER, CLUSTER_NAME), "super user");
        a.create(&[acl(resource::GROUP, "*", pattern::LITERAL, "User:alice", op::ALL, permission::ALLOW)]).unwrap();
        assert!(a.allows(&alice, op::DELETE, resource::GROUP, "g"));
        let mut on_host = acl(resource::CLUSTER, CLUSTER_NAME, pattern::LITERAL, "User:alice", op::ALTER_CONFIGS, 3);
        on_host.host = "10.0.0.1".into();
        a.create(&[on_host]).unwrap();
        assert!(!a.allows(&alice, op::DESCRIBE_CONFIGS, resource::CLUSTER, CLUSTER_NAME), "other host");
        let there = Who { principal: "User:alice".into(), host: "10.0.0.1".into() };
        assert!(a.allows(&there, op::DESCRIBE_CONFIGS, resource::CLUSTER, CLUSTER_NAME), "implied");

        // Stored 0600 and read back by the next start.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(ACLS_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Authorizer::open(dir.path(), Mode::On, true, &[]).unwrap();
        assert_eq!(again.current().len(), 4);
        let all = AclFilter {
            resource_type: resource::TOPIC,
            name: Some("orders".into()),
            pattern_type: pattern::MATCH,
            principal: None,
            host: None,
            operation: op::ANY,
            permission: permission::ANY,
        };
        assert_eq!(again.describe(&all).len(), 2, "MATCH finds the prefixed and the literal ACL");
        let removed = again.delete(&[all]).unwrap();
        assert_eq!(removed[0].len(), 2);
        assert_eq!(Authorizer::open(dir.path(), Mode::On, true, &[]).unwrap().current().len(), 2);
    }

    #[test]
    fn another_writer_is_seen_without_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            Authorizer::open(dir.path(), Mode::On, true, &[]).unwrap(),
            Authorizer::open(dir.path(), Mode::On, true, &[]).unwrap(),
        );
        let alice = who("User:alice");
        a.create(&[acl(resource::TOPIC, "t", pattern::LITERAL, "User:alice", op::READ, permission::ALLOW)]).unwrap();
        assert!(!b.allows(&alice, op::READ, resource::TOPIC, "t"), "not refreshed yet");
        b.refresh();
        assert!(b.allows(&alice, op::READ, resource::TOPIC, "t"), "seen by the other");
        std::fs::write(dir.path().join(ACLS_FILE), "damaged").unwrap();
        b.refresh();
        assert!(b.allows(&alice, op::READ, resource::TOPIC, "t"), "a damaged file keeps the last good copy");
        std::fs::remove_file(dir.path().join(ACLS_FILE)).unwrap();
        b.refresh();
        assert!(!b.allows(&alice, op::READ, resource::TOPIC, "t"), "no file: no ACL");
    }

    #[test]
    fn auto_mode_and_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let loopback = Authorizer::open(dir.path(), Mode::Auto, true, &[]).unwrap();
        let remote = Authorizer::open(dir.path(), Mode::Auto, false, &[]).unwrap();
        assert!(!remote.enforced(), "no ACL yet");
        remote.create(&[acl(resource::TOPIC, "t", pattern::LITERAL, "User:a", op::READ, permission::ALLOW)]).unwrap();
        assert!(remote.enforced());
        assert!(!Authorizer::open(dir.path(), Mode::Auto, true, &[]).unwrap().enforced());
        assert!(!loopback.enforced());
        assert!(acl(resource::ANY, "t", pattern::LITERAL, "User:a", op::READ, 3).invalid().is_some());
        assert!(acl(resource::TOPIC, "t", pattern::MATCH, "User:a", op::READ, 3).invalid().is_some());
        assert!(acl(resource::TOPIC, "t", pattern::LITERAL, "alice", op::READ, 3).invalid().is_some());
        assert!(acl(resource::TOPIC, "t", pattern::LITERAL, "User:a", op::ANY, 3).invalid().is_some());
        assert!(acl(resource::CLUSTER, "x", pattern::LITERAL, "User:a", op::ALTER, 3).invalid().is_some());
        assert!(Authorizer::open(dir.path(), Mode::On, true, &["root".into()]).is_err());
        std::fs::write(dir.path().join(ACLS_FILE), "{\"version\": 1, \"acls\": [{}]}").unwrap();
        let err = Authorizer::open(dir.path(), Mode::On, true, &[]).err().unwrap().to_string();
        assert!(err.contains("damaged"), "{err}");
    }
}
