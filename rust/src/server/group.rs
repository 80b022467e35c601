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

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use super::codes;
use super::group_owner::{self, Claim, NetworkOwner};
use super::waits;

/// The `log` target of group events (Python: `logging.getLogger("kafkalite.server.group")`).
const TARGET: &str = "kafkalite::server::group";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Member {
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub last_seen: Instant,
    /// Joined in the current round (PreparingRebalance).
    pub joined: bool,
    /// `group.instance.id` of a static member (KIP-345); None for a dynamic member.
    pub instance_id: Option<String>,
}

impl Member {
    /// What a (re)join tells about the member: its protocols, timeouts and connection.
    fn update(&mut self, req: &JoinRequest) {
        self.protocols = req.protocols.clone();
        self.session_timeout = req.session_timeout;
        self.rebalance_timeout = req.rebalance_timeout;
        self.client_id = req.client_id.clone();
        self.client_host = req.client_host.clone();
        self.last_seen = Instant::now();
    }
}

#[derive(Debug)]
pub struct Group {
    pub id: String,
    pub state: State,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    rebalance_deadline: Option<Instant>,
    /// Held while the group has network members (`group_owner`); None while it is unused here.
    owner: Option<NetworkOwner>,
}

impl Group {
    fn new(id: &str, protocol_type: &str) -> Group {
        Group {
            id: id.to_string(),
            state: State::Empty,
            generation: 0,
            protocol_type: protocol_type.to_string(),
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            rebalance_deadline: None,
            owner: None,
        }
    }

    /// Start a join round (`reason` is logged, as Kafka's coordinator logs it).
    fn prepare_rebalance(&mut self, reason: &str) {
        if self.members.is_empty() {
            self.state = State::Empty;
            self.leader = None;
            self.protocol = None;
            self.generation += 1;
            self.become_empty(reason);
            return;
        }
        if self.state == State::PreparingRebalance {
            // The round in progress takes the change in (Kafka's maybePrepareRebalance): starting
            // it again would forget who has joined already.
            return;
        }
        log::info!(
            target: TARGET,
            "preparing to rebalance group {:?} with old generation {} ({} member(s); reason: {reason})",
            self.id,
            self.generation,
            self.members.len()
        );
        self.state = State::PreparingRebalance;
        let timeout = self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
        self.rebalance_deadline = Some(Instant::now() + timeout);
        for m in self.members.values_mut() {
            m.joined = false;
        }
    }

    /// End the join round: drop dynamic members that did not rejoin (static ones keep their
    /// place until their session expires, as in Kafka), choose the protocol and leader.
    fn complete_join(&mut self) {
        let id = &self.id;
        self.members.retain(|member, m| {
            if !m.joined && m.instance_id.is_none() {
                log::info!(target: TARGET, "group {id:?}: member {member} did not rejoin in time; removed");
            }
            m.joined || m.instance_id.is_some()
        });
        if !self.members.is_empty() && !self.members.values().any(|m| m.joined) {
            // Only static members that have not rejoined: wait another round for them (Kafka
            // postpones the same way); their sessions expire meanwhile if they are gone.
            let timeout = self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
            self.rebalance_deadline = Some(Instant::now() + timeout);
            return;
        }
        self.generation += 1;
        self.rebalance_deadline = None;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.leader = None;
            self.protocol = None;
            self.become_empty("no member rejoined");
            return;
        }
        // The leader is a member that joined this round (Kafka's maybeElectNewJoinedLeader).
        if !self.leader.as_ref().is_some_and(|l| self.members.get(l).is_some_and(|m| m.joined)) {
            self.leader = self.members.iter().find(|(_, m)| m.joined).map(|(id, _)| id.clone());
        }
        self.protocol = self.select_protocol();
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
        }
        self.state = State::CompletingRebalance;
        log::info!(
            target: TARGET,
            "stabilized group {:?} generation {} ({} member(s), protocol {}, leader {})",
            self.id,
            self.generation,
            self.members.len(),
            self.protocol.as_deref().unwrap_or("none"),
            self.leader.as_deref().unwrap_or("none")
        );
    }

    /// The group has no network members left: give the group id back (embedded consumers of
    /// the same id may join from now on).
    fn become_empty(&mut self, reason: &str) {
        if self.owner.take().is_some() {
            log::info!(
                target: TARGET,
                "group {:?} with generation {} is now empty ({reason}); released it for embedded consumers",
                self.id,
                self.generation
            );
        }
    }

    /// Kafka's selectProtocol: the protocol every member supports with the most votes (each
    /// member votes for its first supported choice); the leader's order breaks ties.
    fn select_protocol(&self) -> Option<String> {
        let leader = self.members.get(self.leader.as_ref()?)?;
        let candidates: Vec<&String> = leader
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| self.members.values().all(|m| m.protocols.iter().any(|(p, _)| p == *n)))
            .collect();
        let votes = |name: &String| {
            self.members
                .values()
                .filter(|m| m.protocols.iter().map(|(p, _)| p).find(|p| candidates.contains(p)) == Some(name))
                .count()
        };
        candidates
            .iter()
            .max_by_key(|n| (votes(n), std::cmp::Reverse(candidates.iter().position(|c| c == *n))))
            .map(|n| n.to_string())
    }

    /// The member id a static member's instance id maps to (Kafka's staticMemberId).
    fn static_member(&self, instance_id: &str) -> Option<&String> {
        self.members.iter().find(|(_, m)| m.instance_id.as_deref() == Some(instance_id)).map(|(id, _)| id)
    }

    /// Kafka's ClassicGroup.validateMember: a request naming an instance id is from the member
    /// that instance id maps to now; any other member id is an older instance that a restart
    /// replaced, fenced with FENCED_INSTANCE_ID (fatal for the client, so two processes with one
    /// instance id cannot both consume).
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
        match instance_id {
            Some(instance) => match self.static_member(instance) {
                None => Err(codes::UNKNOWN_MEMBER_ID),
                Some(current) if current != member_id => {
                    log::info!(
                        target: TARGET,
                        "group {:?}: static member {member_id} (instance id {instance:?}) is fenced: the instance \
                         id now belongs to member {current}",
                        self.id
                    );
                    Err(codes::FENCED_INSTANCE_ID)
                }
                Some(_) => Ok(()),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(codes::UNKNOWN_MEMBER_ID),
        }
    }

    /// Kafka's replaceStaticMember: `new` takes `old`'s place, assignment and leadership.
    fn replace_static_member(&mut self, old: &str, new: &str) {
        if let Some(member) = self.members.remove(old) {
            self.members.insert(new.to_string(), member);
        }
        if self.leader.as_deref() == Some(old) {
            self.leader = Some(new.to_string());
        }
    }

    /// The JoinGroup answer for the current generation; the leader also gets every member with
    /// its instance id and its metadata for the chosen protocol.
    fn join_result(&self, member_id: &str) -> JoinResult {
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            let chosen = self.protocol.clone().unwrap_or_default();
            self.members
                .iter()
                .map(|(id, m)| {
                    let meta =
                        m.protocols.iter().find(|(p, _)| *p == chosen).map(|(_, b)| b.clone()).unwrap_or_default();
                    (id.clone(), m.instance_id.clone(), meta)
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: codes::NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader,
            member_id: member_id.to_string(),
            members,
        }
    }

    fn supports(&self, protocols: &[(String, Bytes)]) -> bool {
        self.members.values().all(|m| m.protocols.iter().any(|(p, _)| protocols.iter().any(|(q, _)| p == q)))
    }
}

/// A member as DescribeGroups shows it.
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// What a JoinGroup call gets back.
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only: every member with its instance id and its metadata for the
    /// chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

/// How a JoinGroup is admitted: it waits for the round to complete, or is answered at once.
enum Admitted {
    Wait(String),
    Answer(JoinResult),
}

pub struct JoinRequest {
    pub group: String,
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// `group.instance.id` (JoinGroup v5+): a static member.
    pub instance_id: Option<String>,
}

/// Kafka's group.min/max.session.timeout.ms defaults.
const MIN_SESSION: Duration = Duration::from_millis(6_000);
const MAX_SESSION: Duration = Duration::from_millis(1_800_000);

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

    fn claimed(&self, group: &str) -> bool {
        self.groups().get(group).is_some_and(|g| g.owner.is_some())
    }

    /// One try at `group_owner::claim` (non-blocking), one claim of this server at a time;
    /// `None` when the group is claimed already.
    async fn try_claim(
        &self,
        group: &str,
    ) -> Option<Result<Result<Claim, crate::error::Error>, tokio::task::JoinError>> {
        let _one_at_a_time = self.claiming.lock().await;
        if self.claimed(group) {
            return None;
        }
        let (dir, id, who) = (self.data_dir.clone(), group.to_string(), self.identity.clone());
        // The folder's file operations, off the request workers.
        Some(tokio::task::spawn_blocking(move || group_owner::claim(&dir, &id, &who)).await)
    }

    /// Make sure this server holds `group`'s claim (`group_owner`); the error code otherwise.
    /// The claim is returned for the caller to install with its first member, in the same
    /// critical section (an unused claim is released by `expire`). An embedded member holding
    /// the group's state lock is waited for with backoff until `waits::LOCK_WAIT`, then the
    /// join is answered COORDINATOR_LOAD_IN_PROGRESS (Kafka's "the coordinator is loading the
    /// group": the client retries the join) and a WARNING names the holder.
    async fn claim(&self, group: &str) -> Result<Option<NetworkOwner>, i16> {
        if self.claimed(group) {
            return Ok(None);
        }
        let started = Instant::now();
        let holder = Mutex::new(String::new());
        let outcome = waits::retry_until(waits::deadline(0), || async {
            match self.try_claim(group).await {
                Some(Ok(Ok(Claim::Busy(who)))) => {
                    *holder.lock().unwrap_or_else(|e| e.into_inner()) = who;
                    None
                }
                other => Some(other),
            }
        })
        .await;
        let Some(claim) = outcome else {
            let holder = holder.into_inner().unwrap_or_else(|e| e.into_inner());
            log::warn!(
                target: TARGET,
                "a join of group {group:?}: gave up after {} ms waiting for the group's state lock, held by {holder} \
                 (an embedded member, stopped or hung?); answered COORDINATOR_LOAD_IN_PROGRESS",
                started.elapsed().as_millis()
            );
            return Err(codes::COORDINATOR_LOAD_IN_PROGRESS);
        };
        let Some(claim) = claim else { return Ok(None) };
        match claim {
            Ok(Ok(Claim::Busy(_))) => Err(codes::COORDINATOR_LOAD_IN_PROGRESS), // never: retried above
            Ok(Ok(Claim::Owned(owner))) => Ok(Some(owner)),
            // Kafka's answer to a member whose protocol differs from the group's (a connect
            // group joined by a consumer, a classic member joining a new-protocol group):
            // fatal for the client, which is what a group in use elsewhere needs.
            Ok(Ok(Claim::Embedded)) => {
                log::warn!(
                    target: TARGET,
                    "refused a network member of group {group:?}: the group has live embedded kafkalite.Consumer \
                     members in this data directory, or static ones within their session \
                     (INCONSISTENT_GROUP_PROTOCOL); use another group id"
                );
                Err(codes::INCONSISTENT_GROUP_PROTOCOL)
            }
            Ok(Ok(Claim::OtherServer(holder))) => {
                log::warn!(
                    target: TARGET,
                    "refused a network member of group {group:?}: the group is coordinated by another server \
                     on this data directory ({holder}) (INCONSISTENT_GROUP_PROTOCOL)"
                );
                Err(codes::INCONSISTENT_GROUP_PROTOCOL)
            }
            Ok(Err(e)) => {
                log::warn!(target: TARGET, "cannot claim group {group:?} for network members: {e}");
                Err(codes::COORDINATOR_NOT_AVAILABLE)
            }
            Err(e) => {
                log::warn!(target: TARGET, "claiming group {group:?} failed: {e}");
                Err(codes::COORDINATOR_NOT_AVAILABLE)
            }
        }
    }

    fn error_join(error: i16, member_id: &str) -> JoinResult {
        JoinResult {
            error,
            generation: -1,
            protocol_type: String::new(),
            protocol: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }

    pub async fn join(&self, req: JoinRequest) -> JoinResult {
        if req.group.is_empty() {
            return Self::error_join(codes::INVALID_GROUP_ID, &req.member_id);
        }
        if !(MIN_SESSION..=MAX_SESSION).contains(&req.session_timeout) {
            return Self::error_join(codes::INVALID_SESSION_TIMEOUT, &req.member_id);
        }
        let mut claim = None;
        let (member_id, joined_generation) = loop {
            if claim.is_none() && !self.claimed(&req.group) {
                match self.claim(&req.group).await {
                    Ok(owner) => claim = owner,
                    Err(code) => return Self::error_join(code, &req.member_id),
                }
            }
            let mut groups = self.groups();
            let group = groups.entry(req.group.clone()).or_insert_with(|| Group::new(&req.group, &req.protocol_type));
            if group.owner.is_none() {
                // Released since `claimed` said yes (the group emptied): claim it again.
                let Some(owner) = claim.take() else { continue };
                group.owner = Some(owner);
                log::info!(
                    target: TARGET,
                    "group {:?} is now coordinated by this server (embedded consumers of it are refused until \
                     it is empty)",
                    req.group
                );
            }
            if group.protocol_type != req.protocol_type && !group.members.is_empty() {
                return Self::error_join(codes::INCONSISTENT_GROUP_PROTOCOL, &req.member_id);
            }
            if !group.supports(&req.protocols) {
                return Self::error_join(codes::INCONSISTENT_GROUP_PROTOCOL, &req.member_id);
            }
            group.protocol_type = req.protocol_type.clone();
            let admitted = if req.member_id.is_empty() {
                self.join_new_member(group, &req)
            } else {
                Self::join_current_member(group, &req)
            };
            match admitted {
                Admitted::Answer(result) => {
                    drop(groups);
                    self.changed.notify_waiters();
                    return result;
                }
                Admitted::Wait(member_id) => {
                    if let Some(m) = group.members.get_mut(&member_id) {
                        m.joined = true;
                    }
                    break (member_id, group.generation);
                }
            }
        };
        self.changed.notify_waiters();
        let instance_id = req.instance_id.as_deref();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wait = {
                let mut groups = self.groups();
                let Some(group) = groups.get_mut(&req.group) else {
                    return Self::error_join(codes::UNKNOWN_MEMBER_ID, &member_id);
                };
                // Removed, or replaced by a newer instance of the same static member (fenced).
                if let Err(code) = group.validate_member(&member_id, instance_id) {
                    return Self::error_join(code, &member_id);
                }
                let Some(me) = group.members.get_mut(&member_id) else {
                    return Self::error_join(codes::UNKNOWN_MEMBER_ID, &member_id);
                };
                // Waiting in JoinGroup counts as alive, and as joined in whatever round is under
                // way; a client that disconnects stops this loop (its request is dropped), and its
                // session then expires.
                me.last_seen = Instant::now();
                if group.state == State::PreparingRebalance {
                    me.joined = true;
                    let all_joined = group.members.values().all(|m| m.joined);
                    let late = group.rebalance_deadline.is_some_and(|d| Instant::now() >= d);
                    if all_joined || late {
                        group.complete_join();
                        self.changed.notify_waiters();
                    }
                }
                // The round this member waited for completed (and the leader may have synced
                // before this waiter woke up: Stable in a newer generation).
                if group.state == State::CompletingRebalance
                    || (group.state == State::Stable && group.generation > joined_generation)
                {
                    return group.join_result(&member_id);
                }
                group
                    .rebalance_deadline
                    .map(|d| d.saturating_duration_since(Instant::now()))
                    .unwrap_or(Duration::from_millis(100))
            };
            let _ = tokio::time::timeout(wait.max(Duration::from_millis(1)), notified).await;
        }
    }

    /// A join without a member id (Kafka's doNewMemberJoinGroup): a new member, or a restarted
    /// static member that takes its old member's place.
    fn join_new_member(&self, group: &mut Group, req: &JoinRequest) -> Admitted {
        let n = self.next_member.fetch_add(1, Ordering::SeqCst);
        // Kafka names members `<group.instance.id or client.id>-<unique>`.
        let prefix = match req.instance_id.as_deref() {
            Some(instance) => instance,
            None if req.client_id.is_empty() => "member",
            None => &req.client_id,
        };
        let member_id = format!("{prefix}-{n}-{}", std::process::id());
        if let Some(old) = req.instance_id.as_deref().and_then(|i| group.static_member(i)).cloned() {
            return Self::replace_static_member(group, req, &old, member_id);
        }
        group.members.insert(
            member_id.clone(),
            Member {
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                session_timeout: req.session_timeout,
                rebalance_timeout: req.rebalance_timeout,
                protocols: req.protocols.clone(),
                assignment: Bytes::new(),
                last_seen: Instant::now(),
                joined: false,
                instance_id: req.instance_id.clone(),
            },
        );
        log::info!(
            target: TARGET,
            "group {:?}: member {member_id} joined (client id {:?}, host {}{})",
            req.group,
            req.client_id,
            req.client_host,
            req.instance_id.as_ref().map(|i| format!(", instance id {i:?}")).unwrap_or_default()
        );
        group.prepare_rebalance(&format!("member {member_id} joined"));
        Admitted::Wait(member_id)
    }

    /// Kafka's updateStaticMemberAndRebalance: the restarted instance gets a new member id in
    /// the old one's place (the old id is fenced from now on). In a Stable group whose selected
    /// protocol stays the same, it is answered at once with the current generation and keeps its
    /// assignment (its SyncGroup returns it): no rebalance. The leader named in that answer is
    /// the one before the replacement, so that a restarted leader does not compute an
    /// assignment that a Stable group would not hand out.
    fn replace_static_member(group: &mut Group, req: &JoinRequest, old: &str, member_id: String) -> Admitted {
        let leader_before = group.leader.clone().unwrap_or_default();
        group.replace_static_member(old, &member_id);
        if let Some(m) = group.members.get_mut(&member_id) {
            m.update(req);
        }
        log::info!(
            target: TARGET,
            "group {:?}: static member with instance id {:?} rejoined as {member_id} in state {}; it replaces \
             member {old}, which is fenced",
            req.group,
            req.instance_id.as_deref().unwrap_or_default(),
            group.state.name()
        );
        match group.state {
            State::Stable if group.select_protocol() == group.protocol => {
                log::info!(
                    target: TARGET,
                    "group {:?}: the static member's rejoin does not change the selected protocol; no rebalance \
                     (generation stays {})",
                    req.group,
                    group.generation
                );
                let mut result = group.join_result(&member_id);
                result.leader = leader_before;
                result.members = Vec::new();
                Admitted::Answer(result)
            }
            State::Stable => {
                group.prepare_rebalance(&format!(
                    "the selected protocol changes: static member {member_id} rejoined with other protocols"
                ));
                Admitted::Wait(member_id)
            }
            // The leader may have been given the old member id to assign to: a new round.
            State::CompletingRebalance => {
                group.prepare_rebalance(&format!("static member {member_id} replaced {old} during a sync"));
                Admitted::Wait(member_id)
            }
            State::PreparingRebalance | State::Empty => {
                group.prepare_rebalance(&format!("static member {member_id} joined"));
                Admitted::Wait(member_id)
            }
        }
    }

    /// A join with a member id (Kafka's doCurrentMemberJoinGroup).
    fn join_current_member(group: &mut Group, req: &JoinRequest) -> Admitted {
        let member_id = req.member_id.clone();
        if let Err(code) = group.validate_member(&member_id, req.instance_id.as_deref()) {
            return Admitted::Answer(Self::error_join(code, &member_id));
        }
        let Some(member) = group.members.get_mut(&member_id) else {
            return Admitted::Answer(Self::error_join(codes::UNKNOWN_MEMBER_ID, &member_id));
        };
        let same = member.protocols == req.protocols;
        member.update(req);
        let is_leader = group.leader.as_deref() == Some(member_id.as_str());
        match group.state {
            State::PreparingRebalance => Admitted::Wait(member_id),
            // Rejoining with the same metadata (it missed the JoinGroup answer, say): the current
            // generation's answer again.
            State::CompletingRebalance if same => Admitted::Answer(group.join_result(&member_id)),
            // A follower with nothing new: it syncs to get its assignment. The leader's join is a
            // request for a rebalance (its topics' metadata changed), as in Kafka.
            State::Stable if same && !is_leader => {
                let mut result = group.join_result(&member_id);
                result.members = Vec::new();
                Admitted::Answer(result)
            }
            State::CompletingRebalance | State::Stable => {
                group.prepare_rebalance(&format!("member {member_id} rejoined"));
                Admitted::Wait(member_id)
            }
            State::Empty => Admitted::Answer(Self::error_join(codes::UNKNOWN_MEMBER_ID, &member_id)),
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
        if crate::failpoint::hit("server.group_heartbeat").is_err() {
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

    /// Whether a commit with this generation/member may be written (Kafka's validateOffsetCommit).
    pub fn check_commit(&self, group_id: &str, member_id: &str, generation: i32) -> Result<(), i16> {
        self.check_commit_of_instance(group_id, member_id, None, generation)
    }

    /// `check_commit` of a request that names its `group_instance_id` (OffsetCommit v7+,
    /// TxnOffsetCommit v3+): FENCED_INSTANCE_ID when the instance id now maps to another member.
    pub fn check_commit_of_instance(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), i16> {
        let groups = self.groups();
        let group = groups.get(group_id);
        if generation < 0 && member_id.is_empty() && instance_id.is_none() {
            // A "simple" consumer (assign, no membership): only while the group has no members.
            return match group {
                Some(g) if !g.members.is_empty() => Err(codes::UNKNOWN_MEMBER_ID),
                _ => Ok(()),
            };
        }
        Self::check_member(group, member_id, instance_id, generation)?;
        // As Kafka: members may still commit while the group prepares a rebalance (their
        // revocation callbacks do), not while the new generation awaits its assignment.
        if group.is_some_and(|g| g.state == State::CompletingRebalance) {
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
