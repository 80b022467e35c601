//! One classic group's state machine (Kafka's ClassicGroup): its members, the join round
//! (PreparingRebalance until every member rejoined or the rebalance timeout passed), the
//! protocol and leader chosen when the round completes, and static members (KIP-345) known by
//! `group.instance.id`: validated, fenced and replaced here. No waiting and no I/O: the
//! `Coordinator` (`group.rs`) holds every group under one mutex and does the waits.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::join::{JoinRequest, JoinResult};
use super::TARGET;
use crate::server::codes;
use crate::server::state::group_owner::NetworkOwner;

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
    pub(super) fn update(&mut self, req: &JoinRequest) {
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
    pub(super) rebalance_deadline: Option<Instant>,
    /// Held while the group has network members (`group_owner`); None while it is unused here.
    pub(super) owner: Option<NetworkOwner>,
}

impl Group {
    pub(super) fn new(id: &str, protocol_type: &str) -> Group {
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
    pub(super) fn prepare_rebalance(&mut self, reason: &str) {
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
    pub(super) fn complete_join(&mut self) {
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
    pub(super) fn become_empty(&mut self, reason: &str) {
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
    pub(super) fn select_protocol(&self) -> Option<String> {
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
    pub(super) fn static_member(&self, instance_id: &str) -> Option<&String> {
        self.members.iter().find(|(_, m)| m.instance_id.as_deref() == Some(instance_id)).map(|(id, _)| id)
    }

    /// Kafka's ClassicGroup.validateMember: a request naming an instance id is from the member
    /// that instance id maps to now; any other member id is an older instance that a restart
    /// replaced, fenced with FENCED_INSTANCE_ID (fatal for the client, so two processes with one
    /// instance id cannot both consume).
    pub(super) fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
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
    pub(super) fn replace_static_member(&mut self, old: &str, new: &str) {
        if let Some(member) = self.members.remove(old) {
            self.members.insert(new.to_string(), member);
        }
        if self.leader.as_deref() == Some(old) {
            self.leader = Some(new.to_string());
        }
    }

    /// The JoinGroup answer for the current generation; the leader also gets every member with
    /// its instance id and its metadata for the chosen protocol.
    pub(super) fn join_result(&self, member_id: &str) -> JoinResult {
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

    pub(super) fn supports(&self, protocols: &[(String, Bytes)]) -> bool {
        self.members.values().all(|m| m.protocols.iter().any(|(p, _)| protocols.iter().any(|(q, _)| p == q)))
    }
}
