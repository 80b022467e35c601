//! The consumer group protocol (KIP-848) for network members, in memory, as Kafka's
//! GroupMetadataManager runs it: members heartbeat (ConsumerGroupHeartbeat) with their
//! subscription and the partitions they own; the group epoch moves when the membership, a
//! subscription or a subscribed topic's partition count changes; the target assignment is then
//! computed by the server-side assignor (`assignors`) at that epoch, and each member is brought
//! to it incrementally (Kafka's CurrentAssignmentBuilder):
//! - partitions it must give up are revoked first (state UnrevokedPartitions, its epoch stays)
//!   and it keeps only the rest until a heartbeat shows it no longer owns the revoked ones;
//! - it then moves to the target epoch, and gets the new partitions that no other member owns
//!   (still assigned or being revoked); the others it gets later (UnreleasedPartitions), once
//!   their previous owner acknowledged revoking them. So a partition never has two owners.
//!
//! A member leaves with epoch -1, a static member (`group.instance.id`) with -2: it keeps its
//! partitions and its place, which a new member with the same instance id takes over (before
//! that, another member with that instance id is refused UNRELEASED_INSTANCE_ID). A member is
//! removed when its session times out (`group.consumer.session.timeout.ms`) or when it does not
//! revoke within its rebalance timeout. Stale epochs get FENCED_MEMBER_EPOCH and unknown members
//! UNKNOWN_MEMBER_ID; both rejoin with epoch 0.
//!
//! A member subscribes to topic names, a regular expression (SubscribedTopicRegex, matched
//! against whole topic names as Kafka's RE2J `matches()` does), or both. The regex is resolved on
//! each of the member's heartbeats against the topics that exist and that the member's principal
//! may DESCRIBE (Kafka's TopicRegexResolver), so a topic created later joins the subscription at
//! the member's next heartbeat and moves the group epoch.
//!
//! A group id is used by one protocol at a time: a classic group with members refuses
//! heartbeats (GROUP_ID_NOT_FOUND, Kafka's answer when the migration policy does not convert
//! the group), and the classic coordinator refuses a JoinGroup to a consumer group with
//! members (`group_api`); a classic JoinGroup to an empty consumer group makes it a classic group
//! (`forget_if_empty`), as Kafka converts it. Like classic groups, a consumer group holds the group's claim against
//! embedded consumers (`group_owner`) while it has members. Committed offsets are checked
//! against member epochs (`check_commit`), and so are a member's OffsetFetch v9 requests
//! (`check_fetch`); the offsets live in `__consumer_offsets` like any group's.
//!
//! Unlike Kafka, the groups are not written to `__consumer_offsets`: after a restart a member's
//! heartbeat finds no group and is answered UNKNOWN_MEMBER_ID (Kafka, whose groups survive,
//! would say GROUP_ID_NOT_FOUND for a group it does not have), so the member rejoins; the
//! committed offsets survive.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::assignors::{self, Assignment, MemberSpec};
use super::group_owner::{self, Claim, NetworkOwner};
use crate::server::codes;

/// The `log` target of consumer group events (Python: `logging.getLogger("kafkalite.server.group")`).
const TARGET: &str = "kafkalite::server::group";

/// Kafka's `group.consumer.session.timeout.ms` default.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_millis(45_000);
/// Kafka's `group.consumer.heartbeat.interval.ms` default.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(5_000);

/// A member's epoch in a heartbeat: join (or rejoin), leave, leave keeping a static member's place.
pub const JOIN_EPOCH: i32 = 0;
pub const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// Where a member is in its reconciliation (Kafka's MemberState).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

/// A member's SubscribedTopicRegex: as sent, and compiled to match whole topic names.
#[derive(Clone, Debug)]
pub struct TopicRegex {
    source: String,
    whole: regex::Regex,
}

impl TopicRegex {
    /// Kafka's check (throwIfRegularExpressionIsInvalid): the error message when it is not a
    /// valid regular expression (including one too big to compile).
    pub fn new(source: &str) -> Result<TopicRegex, String> {
        // RE2J's `matches()` matches the whole name: anchor the expression as a group.
        match regex::Regex::new(&format!("^(?:{source})$")) {
            Ok(whole) => Ok(TopicRegex { source: source.to_string(), whole }),
            Err(e) => Err(format!("SubscribedTopicRegex `{source}` is not a valid regular expression: {e}.")),
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

/// What a heartbeat is checked and resolved against: the topics that exist (partition counts)
/// and whether the member's principal may DESCRIBE a topic (always, without ACLs).
pub struct TopicsView<'a> {
    pub partitions: &'a BTreeMap<String, i32>,
    pub may_describe: &'a dyn Fn(&str) -> bool,
}

#[derive(Clone, Debug)]
struct Member {
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    /// The topic names it subscribes to.
    subscribed: BTreeSet<String>,
    regex: Option<TopicRegex>,
    /// The topics `regex` matched at its last heartbeat.
    matched: BTreeSet<String>,
    server_assignor: Option<String>,
    rebalance_timeout: Duration,
    epoch: i32,
    previous_epoch: i32,
    state: MemberState,
    /// What the member owns now (excluding what it is revoking).
    assigned: Assignment,
    pending_revocation: Assignment,
    last_seen: Instant,
    /// When a member in UnrevokedPartitions is fenced if it has not revoked.
    revocation_deadline: Option<Instant>,
}

impl Member {
    /// Every topic it subscribes to: by name and by its regex.
    fn subscription(&self) -> BTreeSet<String> {
        self.subscribed.union(&self.matched).cloned().collect()
    }
}

#[derive(Debug)]
struct Group {
    epoch: i32,
    assignment_epoch: i32,
    target: BTreeMap<String, Assignment>,
    members: BTreeMap<String, Member>,
    /// Partition counts of the subscribed topics at the last epoch (a change bumps the epoch).
    topics: BTreeMap<String, i32>,
    assignor: String,
    /// Held while the group has members (`group_owner`).
    owner: Option<NetworkOwner>,
}

impl Group {
    fn new() -> Group {
        Group {
            epoch: 0,
            assignment_epoch: 0,
            target: BTreeMap::new(),
            members: BTreeMap::new(),
            topics: BTreeMap::new(),
            assignor: assignors::UNIFORM.to_string(),
            owner: None,
        }
    }

    /// Kafka's consumer group states.
    fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.epoch != self.assignment_epoch {
            "Assigning"
        } else if self.members.values().any(|m| m.epoch != self.assignment_epoch || m.state != MemberState::Stable) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    fn bump(&mut self, id: &str, reason: &str) {
        self.epoch += 1;
        log::info!(target: TARGET, "consumer group {id:?} moves to epoch {} ({reason})", self.epoch);
    }

    fn remove(&mut self, id: &str, member_id: &str, reason: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            log::info!(target: TARGET, "consumer group {id:?}: member {member_id} removed ({reason})");
            self.bump(id, &format!("member {member_id} removed"));
        }
        if self.members.is_empty() && self.owner.take().is_some() {
            log::info!(target: TARGET, "consumer group {id:?} is now empty; released it for embedded consumers");
        }
    }

    fn static_member(&self, instance_id: &str) -> Option<String> {
        self.members.iter().find(|(_, m)| m.instance_id.as_deref() == Some(instance_id)).map(|(id, _)| id.clone())
    }

    /// The assignor most members ask for (Kafka's preferred server assignor); the default when none.
    fn preferred_assignor(&self) -> String {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.server_assignor.as_deref() {
                *votes.entry(a).or_default() += 1;
            }
        }
        let best = votes
            .iter()
            .max_by_key(|(name, n)| (**n, std::cmp::Reverse(assignors::ASSIGNORS.iter().position(|a| a == *name))));
        best.map(|(a, _)| a.to_string()).unwrap_or_else(|| assignors::ASSIGNORS[0].to_string())
    }

    /// The partition counts of the subscribed topics that exist.
    fn subscribed_topics(&self, partitions: &BTreeMap<String, i32>) -> BTreeMap<String, i32> {
        let names: BTreeSet<&String> =
            self.members.values().flat_map(|m| m.subscribed.iter().chain(m.matched.iter())).collect();
        names.into_iter().filter_map(|n| Some((n.clone(), *partitions.get(n)?))).collect()
    }

    /// A new target assignment at the group epoch, if the epoch moved.
    fn update_target(&mut self, id: &str) {
        if self.assignment_epoch == self.epoch {
            return;
        }
        self.assignor = self.preferred_assignor();
        let subscriptions: BTreeMap<&String, BTreeSet<String>> =
            self.members.iter().map(|(mid, m)| (mid, m.subscription())).collect();
        let specs: BTreeMap<String, MemberSpec> = self
            .members
            .iter()
            .map(|(mid, m)| {
                let current = self.target.get(mid).unwrap_or(&m.assigned);
                (mid.clone(), MemberSpec { subscribed: &subscriptions[mid], current })
            })
            .collect();
        let target = assignors::assign(&self.assignor, &specs, &self.topics);
        self.target = target;
        self.assignment_epoch = self.epoch;
        log::info!(
            target: TARGET,
            "consumer group {id:?}: target assignment of epoch {} computed by the {} assignor for {} member(s)",
            self.epoch,
            self.assignor,
            self.members.len()
        );
    }

    /// Whether a member other than `except` owns (`assigned` or revoking) topic-partition `tp`.
    fn owned_by_other(&self, except: &str, topic: &str, partition: i32) -> bool {
        self.members.iter().any(|(id, m)| {
            id != except
                && (m.assigned.get(topic).is_some_and(|p| p.contains(&partition))
                    || m.pending_revocation.get(topic).is_some_and(|p| p.contains(&partition)))
        })
    }

    /// Kafka's CurrentAssignmentBuilder for one member. `owned`: the partitions the member's
    /// heartbeat says it owns (None when it did not say).
    fn reconcile(&mut self, member_id: &str, owned: Option<&Assignment>) {
        let Some(member) = self.members.get(member_id) else { return };
        if member.epoch < 0 {
            return; // a static member that left: its partitions wait for its return
        }
        if member.state == MemberState::UnrevokedPartitions {
            let still_owns = owned.is_none_or(|o| intersects(o, &member.pending_revocation));
            if still_owns {
                return;
            }
        }
        if member.state == MemberState::Stable && member.epoch == self.assignment_epoch {
            return;
        }
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let current = member.assigned.clone();
        let mut kept = Assignment::new();
        let mut revoking = Assignment::new();
        for (topic, partitions) in &current {
            for &p in partitions {
                let slot = if target.get(topic).is_some_and(|t| t.contains(&p)) { &mut kept } else { &mut revoking };
                slot.entry(topic.clone()).or_default().insert(p);
            }
        }
        let mut unreleased = false;
        let mut newly = kept.clone();
        for (topic, partitions) in &target {
            for &p in partitions {
                if current.get(topic).is_some_and(|c| c.contains(&p)) {
                    continue;
                }
                if self.owned_by_other(member_id, topic, p) {
                    unreleased = true;
                } else {
                    newly.entry(topic.clone()).or_default().insert(p);
                }
            }
        }
        let epoch = self.assignment_epoch;
        let m = self.members.get_mut(member_id).unwrap();
        if !revoking.is_empty() {
            m.state = MemberState::UnrevokedPartitions;
            m.assigned = kept;
            m.pending_revocation = revoking;
            m.revocation_deadline = Some(Instant::now() + m.rebalance_timeout);
        } else {
            m.pending_revocation.clear();
            m.revocation_deadline = None;
            m.assigned = newly;
            if m.epoch != epoch {
                m.previous_epoch = m.epoch;
                m.epoch = epoch;
            }
            m.state = if unreleased { MemberState::UnreleasedPartitions } else { MemberState::Stable };
        }
    }
}

fn intersects(a: &Assignment, b: &Assignment) -> bool {
    a.iter().any(|(t, ps)| b.get(t).is_some_and(|q| !ps.is_disjoint(q)))
}

fn subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter().all(|(t, ps)| ps.is_empty() || b.get(t).is_some_and(|q| ps.is_subset(q)))
}

/// One ConsumerGroupHeartbeat, decoded (topic ids already resolved to names).
pub struct Heartbeat {
    pub group: String,
    pub member_id: String,
    pub epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed: Option<Vec<String>>,
    /// None: unchanged; Some(None): no regex (Kafka's empty SubscribedTopicRegex).
    pub regex: Option<Option<TopicRegex>>,
    pub server_assignor: Option<String>,
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// A heartbeat's answer: the member's id and epoch, and its assignment when the member must
/// be told it (Kafka: on a full request or when it changed).
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub epoch: i32,
    pub heartbeat_interval: Duration,
    pub assignment: Option<Assignment>,
}

/// A refusal: Kafka's error code and message.
pub type Refusal = (i16, String);

/// A member as ConsumerGroupDescribe shows it.
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub regex: Option<String>,
    pub assignment: Assignment,
    pub target: Assignment,
}

pub struct Described {
    pub state: &'static str,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<DescribedMember>,
}

pub struct Coordinator {
    groups: Mutex<BTreeMap<String, Group>>,
    /// One claim at a time (see `group::Coordinator::claiming`).
    claiming: Mutex<()>,
    data_dir: PathBuf,
    identity: String,
    session_timeout: Duration,
    heartbeat_interval: Duration,
}

impl Coordinator {
    pub fn new(data_dir: &Path, address: &str, session_timeout: Duration, heartbeat_interval: Duration) -> Coordinator {
        Coordinator {
            groups: Mutex::new(BTreeMap::new()),
            claiming: Mutex::new(()),
            data_dir: data_dir.to_path_buf(),
            identity: format!("kafkalite serve (pid {}, listening on {address})", std::process::id()),
            session_timeout,
            heartbeat_interval,
        }
    }

    /// The groups; a request that panicked holding them leaves them dropped, as in `group`.
    fn groups(&self) -> MutexGuard<'_, BTreeMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|poisoned| {
            let mut groups = poisoned.into_inner();
            log::error!(target: TARGET, "a request panicked while it held the consumer groups' state: dropped it");
            groups.clear();
            self.groups.clear_poison();
            groups
        })
    }

    /// Whether `group` is a consumer group with members (a classic JoinGroup is refused).
    pub fn has_members(&self, group: &str) -> bool {
        self.groups().get(group).is_some_and(|g| !g.members.is_empty())
    }

    /// Make sure this server holds the claim on `group` against embedded consumers.
    fn claim(&self, group: &str) -> Result<(), Refusal> {
        let _one = self.claiming.lock().unwrap_or_else(|e| e.into_inner());
        if self.groups().get(group).is_some_and(|g| g.owner.is_some()) {
            return Ok(());
        }
        let refused =
            |what: String| Err((codes::GROUP_ID_NOT_FOUND, format!("Group {group} is not a consumer group: {what}")));
        match group_owner::claim(&self.data_dir, group, &self.identity) {
            Ok(Claim::Owned(owner)) => {
                self.groups().entry(group.to_string()).or_insert_with(Group::new).owner = Some(owner);
                Ok(())
            }
            Ok(Claim::Embedded) => refused("it has live embedded kafkalite.Consumer members".into()),
            Ok(Claim::OtherServer(who)) => refused(format!("it is coordinated elsewhere ({who})")),
            Ok(Claim::Busy(who)) => Err((
                codes::COORDINATOR_LOAD_IN_PROGRESS,
                format!("an embedded member ({who}) holds the group's state lock; retry"),
            )),
            Err(e) => Err((codes::COORDINATOR_NOT_AVAILABLE, format!("cannot claim the group: {e}"))),
        }
    }

    /// ConsumerGroupHeartbeat after the request's checks (`consumer_group_api`).
    pub fn heartbeat(&self, hb: Heartbeat, topics: &TopicsView) -> Result<HeartbeatAnswer, Refusal> {
        if hb.epoch == JOIN_EPOCH {
            self.claim(&hb.group)?;
        }
        let mut groups = self.groups();
        let Some(group) = groups.get_mut(&hb.group) else {
            return Err((
                codes::UNKNOWN_MEMBER_ID,
                format!("consumer group {:?} has no member {:?}", hb.group, hb.member_id),
            ));
        };
        let gid = hb.group.as_str();
        match hb.epoch {
            LEAVE_EPOCH | STATIC_LEAVE_EPOCH => return Self::leave(group, gid, &hb),
            JOIN_EPOCH => Self::join(group, gid, &hb)?,
            _ => Self::check_member(group, gid, &hb)?,
        }
        let member_id = hb.member_id.clone();
        let before = group.members[&member_id].assigned.clone();
        // What the heartbeat changes in the member, and whether that moves the group epoch.
        let m = group.members.get_mut(&member_id).unwrap();
        m.last_seen = Instant::now();
        m.client_id = hb.client_id.clone();
        m.client_host = hb.client_host.clone();
        if hb.rack_id.is_some() {
            m.rack_id = hb.rack_id.clone();
        }
        if hb.rebalance_timeout_ms >= 0 {
            m.rebalance_timeout = Duration::from_millis(hb.rebalance_timeout_ms as u64);
        }
        let mut changed = Vec::new();
        if let Some(subscribed) = &hb.subscribed {
            let subscribed: BTreeSet<String> = subscribed.iter().cloned().collect();
            if subscribed != m.subscribed {
                m.subscribed = subscribed;
                changed.push(format!("member {member_id} changed its subscription"));
            }
        }
        if let Some(regex) = &hb.regex {
            if regex.as_ref().map(TopicRegex::source) != m.regex.as_ref().map(TopicRegex::source) {
                m.regex = regex.clone();
                changed.push(format!("member {member_id} changed its subscribed regex"));
            }
        }
        // The regex again on every heartbeat: topics created (or deleted) since, or ACLs changed.
        let matched: BTreeSet<String> = match &m.regex {
            Some(r) => {
                topics.partitions.keys().filter(|t| r.whole.is_match(t) && (topics.may_describe)(t)).cloned().collect()
            }
            None => BTreeSet::new(),
        };
        if matched != m.matched {
            m.matched = matched;
            changed.push(format!("member {member_id}'s regex matches {} topic(s) now", m.matched.len()));
        }
        if hb.server_assignor.is_some() && hb.server_assignor != m.server_assignor {
            m.server_assignor = hb.server_assignor.clone();
            changed.push(format!(
                "member {member_id} asks for the {} assignor",
                hb.server_assignor.as_deref().unwrap_or("")
            ));
        }
        let subscribed = group.subscribed_topics(topics.partitions);
        if subscribed != group.topics {
            group.topics = subscribed;
            changed.push("the subscribed topics' metadata changed".into());
        }
        if !changed.is_empty() {
            group.bump(gid, &changed.join("; "));
        }
        group.update_target(gid);
        group.reconcile(&member_id, hb.owned.as_ref());
        let m = &group.members[&member_id];
        let full = hb.epoch == JOIN_EPOCH
            || (hb.rebalance_timeout_ms != -1 && (hb.subscribed.is_some() || hb.regex.is_some()) && hb.owned.is_some());
        Ok(HeartbeatAnswer {
            member_id: member_id.clone(),
            epoch: m.epoch,
            heartbeat_interval: self.heartbeat_interval,
            assignment: (full || m.assigned != before).then(|| m.assigned.clone()),
        })
    }

    /// A join (epoch 0): a new member, a member that rejoins (it owns nothing now), or a new
    /// instance of a static member that left with epoch -2, which takes its place.
    fn join(group: &mut Group, gid: &str, hb: &Heartbeat) -> Result<(), Refusal> {
        let fresh = || Member {
            instance_id: hb.instance_id.clone(),
            rack_id: hb.rack_id.clone(),
            client_id: hb.client_id.clone(),
            client_host: hb.client_host.clone(),
            subscribed: BTreeSet::new(),
            regex: None,
            matched: BTreeSet::new(),
            server_assignor: None,
            rebalance_timeout: Duration::from_millis(hb.rebalance_timeout_ms.max(0) as u64),
            epoch: 0,
            previous_epoch: -1,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            last_seen: Instant::now(),
            revocation_deadline: None,
        };
        if let Some(instance) = hb.instance_id.as_deref() {
            if let Some(old) = group.static_member(instance) {
                if old != hb.member_id {
                    if group.members[&old].epoch != STATIC_LEAVE_EPOCH {
                        return Err((
                            codes::UNRELEASED_INSTANCE_ID,
                            format!("Static member {old} with instance id {instance} is not released yet"),
                        ));
                    }
                    // The new instance takes the old one's place and target assignment: no new epoch.
                    let mut member = group.members.remove(&old).unwrap();
                    let target = group.target.remove(&old);
                    member.instance_id = hb.instance_id.clone();
                    member.epoch = 0;
                    member.previous_epoch = -1;
                    member.assigned.clear();
                    member.pending_revocation.clear();
                    member.state = MemberState::Stable;
                    member.last_seen = Instant::now();
                    group.members.insert(hb.member_id.clone(), member);
                    if let Some(target) = target {
                        group.target.insert(hb.member_id.clone(), target);
                    }
                    log::info!(
                        target: TARGET,
                        "consumer group {gid:?}: static member {} (instance id {instance:?}) replaces member {old}",
                        hb.member_id
                    );
                    return Ok(());
                }
            }
        }
        match group.members.get_mut(&hb.member_id) {
            Some(m) => {
                // A rejoin: it says it owns nothing, so what it had is free.
                log::info!(target: TARGET, "consumer group {gid:?}: member {} rejoins", hb.member_id);
                m.epoch = 0;
                m.assigned.clear();
                m.pending_revocation.clear();
                m.state = MemberState::Stable;
            }
            None => {
                group.members.insert(hb.member_id.clone(), fresh());
                log::info!(
                    target: TARGET,
                    "consumer group {gid:?}: member {} joined (client id {:?}, host {}{})",
                    hb.member_id,
                    hb.client_id,
                    hb.client_host,
                    hb.instance_id.as_ref().map(|i| format!(", instance id {i:?}")).unwrap_or_default()
                );
                group.bump(gid, &format!("member {} joined", hb.member_id));
            }
        }
        Ok(())
    }

    /// A heartbeat with an epoch > 0: Kafka's member and epoch checks.
    fn check_member(group: &Group, gid: &str, hb: &Heartbeat) -> Result<(), Refusal> {
        // A static member is found by its instance id (Kafka's throwIfStaticMemberIsUnknown and
        // throwIfInstanceIdIsFenced): an old instance replaced by a new one is fenced.
        if let Some(instance) = hb.instance_id.as_deref() {
            match group.static_member(instance) {
                None => {
                    return Err((codes::UNKNOWN_MEMBER_ID, format!("Instance id {instance} is unknown in group {gid}")))
                }
                Some(current) if current != hb.member_id => {
                    return Err((
                        codes::FENCED_INSTANCE_ID,
                        format!("Static member {} with instance id {instance} was fenced by {current}", hb.member_id),
                    ))
                }
                Some(_) => {}
            }
        }
        let Some(m) = group.members.get(&hb.member_id) else {
            return Err((codes::UNKNOWN_MEMBER_ID, format!("Member {} is not a member of group {gid}", hb.member_id)));
        };
        let fenced = || {
            Err((
                codes::FENCED_MEMBER_EPOCH,
                format!(
                    "The consumer group member has a member epoch ({}) that is not the current one ({})",
                    hb.epoch, m.epoch
                ),
            ))
        };
        if hb.epoch > m.epoch {
            return fenced();
        }
        if hb.epoch < m.epoch {
            // The member may not have received the answer that moved it: its previous epoch is
            // accepted while what it owns is still assigned to it.
            let owned_ok = hb.owned.as_ref().is_some_and(|o| subset(o, &m.assigned));
            if hb.epoch != m.previous_epoch || !owned_ok {
                return fenced();
            }
        }
        Ok(())
    }

    /// Epoch -1: the member leaves and its partitions are free; -2: a static member leaves
    /// keeping its place and partitions until it returns or its session expires.
    fn leave(group: &mut Group, gid: &str, hb: &Heartbeat) -> Result<HeartbeatAnswer, Refusal> {
        let member_id = match hb.instance_id.as_deref() {
            Some(instance) => {
                let Some(current) = group.static_member(instance) else {
                    return Err((
                        codes::UNKNOWN_MEMBER_ID,
                        format!("Instance id {instance} is unknown in group {gid}"),
                    ));
                };
                if current != hb.member_id {
                    return Err((
                        codes::FENCED_INSTANCE_ID,
                        format!("Static member {} with instance id {instance} was fenced by {current}", hb.member_id),
                    ));
                }
                current
            }
            None if group.members.contains_key(&hb.member_id) => hb.member_id.clone(),
            None => {
                return Err((
                    codes::UNKNOWN_MEMBER_ID,
                    format!("Member {} is not a member of group {gid}", hb.member_id),
                ))
            }
        };
        if hb.epoch == STATIC_LEAVE_EPOCH {
            let m = group.members.get_mut(&member_id).unwrap();
            m.epoch = STATIC_LEAVE_EPOCH;
            log::info!(target: TARGET, "consumer group {gid:?}: static member {member_id} left temporarily; its partitions wait for it");
        } else {
            group.remove(gid, &member_id, "it left the group");
        }
        Ok(HeartbeatAnswer { member_id, epoch: hb.epoch, heartbeat_interval: Duration::ZERO, assignment: None })
    }

    /// Remove members whose session expired or who did not revoke within their rebalance timeout.
    pub fn expire(&self) {
        let mut groups = self.groups();
        let now = Instant::now();
        for (gid, group) in groups.iter_mut() {
            let gone: Vec<(String, String)> = group
                .members
                .iter()
                .filter_map(|(id, m)| {
                    if now.duration_since(m.last_seen) > self.session_timeout {
                        Some((
                            id.clone(),
                            format!(
                                "no heartbeat within group.consumer.session.timeout.ms ({} ms)",
                                self.session_timeout.as_millis()
                            ),
                        ))
                    } else if m.revocation_deadline.is_some_and(|d| now >= d) {
                        Some((
                            id.clone(),
                            format!(
                                "it did not revoke its partitions within its rebalance timeout ({} ms)",
                                m.rebalance_timeout.as_millis()
                            ),
                        ))
                    } else {
                        None
                    }
                })
                .collect();
            for (member_id, reason) in gone {
                group.remove(gid, &member_id, &reason);
            }
        }
    }

    /// The check of a commit (OffsetCommit, TxnOffsetCommit: `transactional`) to `group` when it
    /// is a consumer group with members (Kafka's ConsumerGroup.validateOffsetCommit): None when
    /// it is not one (an empty one takes any commit with a negative epoch, as a classic group
    /// does). A member commits at its current epoch; OffsetCommit of a consumer-protocol member
    /// needs v9+, TxnOffsetCommit any version. A stale epoch is STALE_MEMBER_EPOCH, or, for
    /// TxnOffsetCommit, whose clients know no such code, ILLEGAL_GENERATION (Kafka's
    /// OffsetMetadataManager.validateTransactionalOffsetCommit).
    pub fn check_commit(
        &self,
        group: &str,
        member_id: &str,
        epoch: i32,
        version: i16,
        transactional: bool,
    ) -> Option<Result<(), i16>> {
        let groups = self.groups();
        let g = groups.get(group).filter(|g| !g.members.is_empty())?;
        // No member id (an admin, a consumer outside the group) is a member the group does not have.
        let Some(m) = g.members.get(member_id) else { return Some(Err(codes::UNKNOWN_MEMBER_ID)) };
        if !transactional && version < 9 {
            return Some(Err(codes::UNSUPPORTED_VERSION));
        }
        Some(match (epoch == m.epoch, transactional) {
            (true, _) => Ok(()),
            (false, false) => Err(codes::STALE_MEMBER_EPOCH),
            (false, true) => Err(codes::ILLEGAL_GENERATION),
        })
    }

    /// OffsetFetch v9's member check (Kafka's ConsumerGroup.validateOffsetFetch): a request with
    /// no member id and a negative epoch (an admin, a consumer outside the group) is not checked;
    /// any other must come from a member (UNKNOWN_MEMBER_ID) at its current epoch
    /// (STALE_MEMBER_EPOCH). None when there is nothing to refuse, or when `group` is not a
    /// consumer group of this coordinator (a classic group does not check, as in Kafka).
    pub fn check_fetch(&self, group: &str, member_id: Option<&str>, epoch: i32) -> Option<(i16, String)> {
        if member_id.is_none() && epoch < 0 {
            return None;
        }
        let groups = self.groups();
        let g = groups.get(group)?;
        let member_id = member_id.unwrap_or_default();
        match g.members.get(member_id) {
            None => Some((codes::UNKNOWN_MEMBER_ID, format!("Member {member_id:?} is not a member of group {group}"))),
            Some(m) if m.epoch != epoch => Some((
                codes::STALE_MEMBER_EPOCH,
                format!("member {member_id} fetched with epoch {epoch}; its epoch is {}", m.epoch),
            )),
            Some(_) => None,
        }
    }

    /// A classic JoinGroup takes over `group` when it is an empty consumer group: Kafka deletes
    /// the empty consumer group and creates a classic one, so the group is not described or
    /// listed as an empty consumer group while classic members use it.
    pub fn forget_if_empty(&self, group: &str) {
        let mut groups = self.groups();
        if groups.get(group).is_some_and(|g| g.members.is_empty()) {
            groups.remove(group);
            log::info!(target: TARGET, "consumer group {group:?} was empty; a classic JoinGroup converts it to a classic group");
        }
    }

    pub fn describe(&self, group: &str) -> Option<Described> {
        let groups = self.groups();
        let g = groups.get(group)?;
        let members = g
            .members
            .iter()
            .map(|(id, m)| DescribedMember {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                epoch: m.epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed: m.subscribed.iter().cloned().collect(),
                regex: m.regex.as_ref().map(|r| r.source.clone()),
                assignment: m.assigned.clone(),
                target: g.target.get(id).cloned().unwrap_or_default(),
            })
            .collect();
        Some(Described {
            state: g.state(),
            epoch: g.epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: g.assignor.clone(),
            members,
        })
    }

    /// (group, state) of every consumer group.
    pub fn list(&self) -> Vec<(String, &'static str)> {
        self.groups().iter().map(|(id, g)| (id.clone(), g.state())).collect()
    }

    /// Forget a group without members (DeleteGroups); NON_EMPTY_GROUP while it has members.
    pub fn delete(&self, group: &str) -> Result<bool, i16> {
        let mut groups = self.groups();
        match groups.get(group) {
            Some(g) if !g.members.is_empty() => Err(codes::NON_EMPTY_GROUP),
            Some(_) => Ok(groups.remove(group).is_some()),
            None => Ok(false),
        }
    }
}
