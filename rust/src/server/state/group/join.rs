//! JoinGroup (Kafka's GroupCoordinator.handleJoinGroup for classic groups): a new member, a
//! restarted static member taking its old member's place, or a current member rejoining; then
//! the wait until the join round completes (`state`'s `complete_join`), answered with the
//! generation, the protocol and, for the leader, every member's metadata.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::state::{Group, Member, State};
use super::{Coordinator, TARGET};
use crate::server::codes;

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

impl Coordinator {
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
}
