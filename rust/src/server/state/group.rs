//! The classic consumer-group coordinator for network members (Kafka's GroupCoordinator,
//! in memory): JoinGroup rounds with a rebalance timeout, the leader's assignment handed
//! out by SyncGroup, heartbeats and session expiry, LeaveGroup. The assignment itself is
//! computed by the leader client, as in Kafka. Groups live as long as the server; their
//! committed offsets live in `__consumer_offsets` (see `offsets`).
//!
//! A group id is coordinated either by embedded consumers (`group.py`) or by this server,
//! never both: while a group has network members the server holds its claim file, and a group
//! with live embedded members is refused (see `group_owner`). So a partition never has two
//! owners. Joins, rebalances and evictions are logged at INFO on `kafkalite.server.group`.
//!
//! Static membership (KIP-345) follows Kafka's ClassicGroup: a member that joins with a
//! `group.instance.id` is known by it. A restarted instance (unknown member id, known instance
//! id) takes its old member's place, assignment and leadership; in a Stable group whose
//! selected protocol stays the same that is no rebalance at all. The old member id is fenced
//! (FENCED_INSTANCE_ID on every request that names the instance id). A static member that does
//! not rejoin a round keeps its place (its partitions wait for it) until its session expires;
//! LeaveGroup v3+ removes a static member by instance id.
//!
//! Here: the `Coordinator` (every group, under one mutex) and the requests after the join:
//! SyncGroup, Heartbeat, LeaveGroup, commits' checks, session expiry, DescribeGroups, ListGroups,
//! DeleteGroups. Beside it: `group/state.rs` (one group's state machine, Kafka's ClassicGroup),
//! `group/join.rs` (JoinGroup and its wait) and `group/claim.rs` (the group's claim file for
//! network members).

mod claim;
mod join;
mod state;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::server::codes;
use state::{Group, State};

pub use join::JoinRequest;

/// The `log` target of group events (Python: `logging.getLogger("kafkalite.server.group")`).
const TARGET: &str = "kafkalite::server::group";

/// A member as DescribeGroups shows it.
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

pub struct Coordinator {
    /// Locked through `groups()`, never `lock`: a panic can leave a group half way through a
    /// state change.
    groups: Mutex<BTreeMap<String, Group>>,
    changed: Arc<Notify>,
    next_member: AtomicU64,
    data_dir: std::path::PathBuf,
    /// Written into each group's claim file: which server holds it (for the embedded side's error).
    identity: String,
    /// One claim at a time: two joins of an unclaimed group must not both try to flock it
    /// (the second would find this very server's lock and be refused). Held only for one
    /// non-blocking try, never across a wait for an embedded member's lock.
    claiming: tokio::sync::Mutex<()>,
}

impl Coordinator {
    /// The groups. A request that panicked holding them (a bug) may have left a group half way
    /// through a state change: that state is dropped, as Kafka's coordinator state is when the
    /// coordinator moves (claims released, members answered UNKNOWN_MEMBER_ID, so they rejoin
    /// and resume from their committed offsets), and the panic is logged at ERROR.
    fn groups(&self) -> MutexGuard<'_, BTreeMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|poisoned| {
            let mut groups = poisoned.into_inner();
            log::error!(
                target: TARGET,
                "a request panicked while it held the consumer groups' state: dropped the state of {} group(s); \
                 their members rejoin",
                groups.len()
            );
            groups.clear();
            self.groups.clear_poison();
            groups
        })
    }

    /// `address`: where this server listens, for the claim files' text.
    pub fn new(data_dir: &Path, address: &str) -> Coordinator {
        Coordinator {
            groups: Mutex::new(BTreeMap::new()),
            changed: Arc::new(Notify::new()),
            next_member: AtomicU64::new(0),
            data_dir: data_dir.to_path_buf(),
            identity: format!("kafkalite serve (pid {}, listening on {address})", std::process::id()),
            claiming: tokio::sync::Mutex::new(()),
        }
    }

    /// Kafka's checks of SyncGroup, Heartbeat and OffsetCommit: the member (and its instance
    /// id: FENCED_INSTANCE_ID for a replaced instance), then the generation.
    fn check_member(
        group: Option<&Group>,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), i16> {
        let Some(group) = group else { return Err(codes::UNKNOWN_MEMBER_ID) };
        group.validate_member(member_id, instance_id)?;
        if generation != group.generation {
            return Err(codes::ILLEGAL_GENERATION);
        }
        Ok(())
    }

    /// SyncGroup: the leader hands in the assignment; everyone waits for theirs.
    pub async fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> (i16, Bytes, String, Option<String>) {
        {
            let mut groups = self.groups();
            let group = groups.get_mut(group_id);
            if let Err(code) = Self::check_member(group.as_deref(), member_id, instance_id, generation) {
                return (code, Bytes::new(), String::new(), None);
            }
            let group = group.unwrap();
            if group.state == State::PreparingRebalance {
                return (codes::REBALANCE_IN_PROGRESS, Bytes::new(), String::new(), None);
            }
            if group.leader.as_deref() == Some(member_id) && group.state == State::CompletingRebalance {
                for (id, assignment) in assignments {
                    if let Some(m) = group.members.get_mut(&id) {
                        m.assignment = assignment;
                    }
                }
                group.state = State::Stable;
            }
            if let Some(m) = group.members.get_mut(member_id) {
                m.last_seen = Instant::now();
            }
        }
        self.changed.notify_waiters();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut groups = self.groups();
                let group = groups.get_mut(group_id);
                if let Err(code) = Self::check_member(group.as_deref(), member_id, instance_id, generation) {
                    return (code, Bytes::new(), String::new(), None);
                }
                let group = group.unwrap();
                match group.state {
                    State::Stable => {
                        let m = group.members.get_mut(member_id).unwrap();
                        m.last_seen = Instant::now();
                        return (
                            codes::NONE,
                            m.assignment.clone(),
                            group.protocol_type.clone(),
                            group.protocol.clone(),
                        );
                    }
                    State::PreparingRebalance | State::Empty => {
                        return (codes::REBALANCE_IN_PROGRESS, Bytes::new(), String::new(), None)
                    }
                    State::CompletingRebalance => {
                        // Waiting for the leader's assignment counts as alive (see join).
                        group.members.get_mut(member_id).unwrap().last_seen = Instant::now();
                    }
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
        }
    }

    pub fn heartbeat(&self, group_id: &str, member_id: &str, instance_id: Option<&str>, generation: i32) -> i16 {
        let mut groups = self.groups();
        // A panic here (a bug) leaves the groups' state locked half way through a request.
        if crate::storage::failpoint::hit("server.group_heartbeat").is_err() {
            return codes::COORDINATOR_NOT_AVAILABLE;
        }
        let group = groups.get_mut(group_id);
        if let Err(code) = Self::check_member(group.as_deref(), member_id, instance_id, generation) {
            // A member of an older generation learns of the rebalance from this error.
            return code;
        }
        let group = group.unwrap();
        group.members.get_mut(member_id).unwrap().last_seen = Instant::now();
        match group.state {
            State::PreparingRebalance => codes::REBALANCE_IN_PROGRESS,
            _ => codes::NONE,
        }
    }

    /// LeaveGroup of one member (Kafka's classicGroupLeave): by member id, checked against its
    /// instance id when given; or, with no member id (LeaveGroup v3+, an administrator's removal
    /// of a static member), by instance id alone.
    pub fn leave(&self, group_id: &str, member_id: &str, instance_id: Option<&str>) -> i16 {
        let code = {
            let mut groups = self.groups();
            match groups.get_mut(group_id) {
                Some(group) => {
                    let leaving = if member_id.is_empty() {
                        instance_id.and_then(|i| group.static_member(i)).cloned().ok_or(codes::UNKNOWN_MEMBER_ID)
                    } else {
                        group.validate_member(member_id, instance_id).map(|()| member_id.to_string())
                    };
                    match leaving {
                        Ok(leaving) => {
                            group.members.remove(&leaving);
                            log::info!(
                                target: TARGET,
                                "group {group_id:?}: member {leaving}{} left",
                                instance_id.map(|i| format!(" (instance id {i:?})")).unwrap_or_default()
                            );
                            group.prepare_rebalance(&format!("member {leaving} left"));
                            codes::NONE
                        }
                        Err(code) => code,
                    }
                }
                None => codes::UNKNOWN_MEMBER_ID,
            }
        };
        self.changed.notify_waiters();
        code
    }

    /// Whether a commit (OffsetCommit, TxnOffsetCommit: `transactional`) by this member, of this
    /// generation, may be written (Kafka's ClassicGroup.validateOffsetCommit). A request that
    /// names its `group_instance_id` (OffsetCommit v7+, TxnOffsetCommit v3+) is FENCED_INSTANCE_ID
    /// when the instance id now maps to another member.
    pub fn check_commit_of_instance(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        transactional: bool,
    ) -> Result<(), i16> {
        let groups = self.groups();
        let group = groups.get(group_id);
        if generation < 0 && group.is_none_or(|g| g.members.is_empty()) {
            // Generation -1 (the admin client, a consumer without group management) commits to
            // an empty group whatever member id it names, as Kafka's check lets it.
            return Ok(());
        }
        if generation < 0 && member_id.is_empty() && instance_id.is_none() {
            // A "simple" consumer (assign, no membership) to a group with members.
            return Err(codes::UNKNOWN_MEMBER_ID);
        }
        Self::check_member(group, member_id, instance_id, generation)?;
        // As Kafka: members may still commit while the group prepares a rebalance (their
        // revocation callbacks do), not while the new generation awaits its assignment; the
        // group's state does not matter to a transactional commit.
        if !transactional && group.is_some_and(|g| g.state == State::CompletingRebalance) {
            return Err(codes::REBALANCE_IN_PROGRESS);
        }
        Ok(())
    }

    /// Expire members whose session timed out; rebalance their groups.
    pub fn expire(&self) {
        let mut any = false;
        {
            let mut groups = self.groups();
            let now = Instant::now();
            for group in groups.values_mut() {
                let before = group.members.len();
                let id = &group.id;
                group.members.retain(|member, m| {
                    let alive = now.duration_since(m.last_seen) <= m.session_timeout;
                    if !alive {
                        log::info!(
                            target: TARGET,
                            "group {id:?}: member {member}{} has failed (no heartbeat within session.timeout.ms, \
                             {} ms); removed",
                            m.instance_id.as_ref().map(|i| format!(" (instance id {i:?})")).unwrap_or_default(),
                            m.session_timeout.as_millis()
                        );
                    }
                    alive
                });
                if group.members.len() != before {
                    group.prepare_rebalance("members' sessions expired");
                    any = true;
                } else if group.members.is_empty() {
                    // A claim whose join was refused after it was taken (see `join`).
                    group.become_empty("no members");
                }
                if group.state == State::PreparingRebalance && group.rebalance_deadline.is_some_and(|d| now >= d) {
                    any = true; // a waiting joiner completes the round
                }
            }
        }
        if any {
            self.changed.notify_waiters();
        }
    }

    /// (state, protocol type, protocol, members).
    pub fn describe(&self, group_id: &str) -> Option<(String, String, Option<String>, Vec<DescribedMember>)> {
        let groups = self.groups();
        let g = groups.get(group_id)?;
        let members = g
            .members
            .iter()
            .map(|(id, m)| {
                let meta = g
                    .protocol
                    .as_ref()
                    .and_then(|p| m.protocols.iter().find(|(n, _)| n == p))
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default();
                DescribedMember {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: meta,
                    assignment: m.assignment.clone(),
                }
            })
            .collect();
        Some((g.state.name().to_string(), g.protocol_type.clone(), g.protocol.clone(), members))
    }

    /// Forget a group without members (DeleteGroups). NON_EMPTY_GROUP while it has members;
    /// Ok(true) when the coordinator knew it.
    pub fn delete(&self, group_id: &str) -> Result<bool, i16> {
        let mut groups = self.groups();
        match groups.get(group_id) {
            Some(g) if !g.members.is_empty() => Err(codes::NON_EMPTY_GROUP),
            Some(_) => Ok(groups.remove(group_id).is_some()),
            None => Ok(false),
        }
    }

    pub fn list(&self) -> Vec<(String, String, String)> {
        self.groups().iter().map(|(id, g)| (id.clone(), g.protocol_type.clone(), g.state.name().to_string())).collect()
    }
}
