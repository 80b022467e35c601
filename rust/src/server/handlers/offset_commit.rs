//! OffsetCommit and OffsetFetch for network consumers, through `offsets::OffsetStore`.
//! Commits are checked as Kafka's group coordinator checks them: members of the current
//! generation, or "simple" consumers (generation -1, whatever member id: `assign()`, an
//! admin's offset reset) of a group without members. A group's members are this server's network
//! members and the embedded `kafkalite.Consumer`s of the same group id (`group_owner`), so a
//! commit from outside can never rewind a group that one of them is consuming.

use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::server::codes;
use crate::server::security::authorizer::{op, resource, Who};
use crate::server::state::broker::Broker;
use crate::server::state::group_owner::embedded_members;
use crate::server::state::offsets::MAX_METADATA_BYTES;

/// A partition of a commit request: its index and error code (None: to be written).
type PartitionPlan = (i32, Option<i16>);

/// A commit as requested: partition, offset, metadata.
pub type Requested = (i32, i64, Option<String>);

/// A commit request's topics as `CommitPlan::new` takes them: OffsetCommit's and
/// TxnOffsetCommit's have the same fields, in types of their own.
macro_rules! requested {
    ($topics:expr) => {
        $topics.iter().map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset, p.committed_metadata.as_ref().map(|m| m.to_string())));
            (t.name.clone(), partitions.collect())
        })
    };
}
pub(super) use requested;

/// What a commit request (OffsetCommit, TxnOffsetCommit) does with each partition, checked as
/// Kafka's group coordinator checks it: the group's verdict, metadata no longer than
/// `offset.metadata.max.bytes`, a partition that exists. The rest are `commits`, written (or
/// not) together.
pub struct CommitPlan {
    plan: Vec<(TopicName, Vec<PartitionPlan>)>,
    /// (topic, partition, offset, metadata) to write.
    pub commits: Vec<(String, i32, i64, Option<String>)>,
}

impl CommitPlan {
    pub fn new(
        broker: &Broker,
        topics: impl Iterator<Item = (TopicName, Vec<Requested>)>,
        verdict: Result<(), i16>,
    ) -> CommitPlan {
        let known_topics = broker.topics().ok();
        let known = |t: &str, p: i32| {
            known_topics.as_ref().and_then(|all| all.get(t)).is_some_and(|m| (0..m.partitions).contains(&p))
        };
        let (mut plan, mut commits) = (Vec::new(), Vec::new());
        for (topic, partitions) in topics {
            let name = topic.0.to_string();
            let mut parts = Vec::new();
            for (partition, offset, metadata) in partitions {
                let code = if let Err(code) = verdict {
                    Some(code)
                } else if metadata.as_ref().is_some_and(|m| m.len() > MAX_METADATA_BYTES) {
                    Some(codes::OFFSET_METADATA_TOO_LARGE)
                } else if !known(&name, partition) {
                    Some(codes::UNKNOWN_TOPIC_OR_PARTITION)
                } else {
                    commits.push((name.clone(), partition, offset, metadata));
                    None
                };
                parts.push((partition, code));
            }
            plan.push((topic, parts));
        }
        CommitPlan { plan, commits }
    }

    /// Each topic's partitions with their codes, once the commits were written (`Ok`) or not.
    pub fn answered(
        self,
        written: Result<(), i16>,
    ) -> impl Iterator<Item = (TopicName, impl Iterator<Item = (i32, i16)>)> {
        self.plan.into_iter().map(move |(name, parts)| {
            let coded = parts
                .into_iter()
                .map(move |(index, code)| (index, code.unwrap_or_else(|| written.err().unwrap_or(codes::NONE))));
            (name, coded)
        })
    }
}

/// Why a commit from outside the group (generation < 0, with or without a member id) is
/// refused, when it is: the group has live members. Kafka's ClassicGroup.validateOffsetCommit
/// answers UNKNOWN_MEMBER_ID unless the group is empty; the embedded members count as members,
/// for a transactional commit too (they cannot be named, so nothing from outside may rewind them).
pub fn outside_commit_refused(broker: &Broker, group: &str, member_id: &str, generation: i32) -> Option<String> {
    if generation >= 0 {
        return None;
    }
    if embedded_members(broker.dir.path(), group) {
        return Some(format!(
            "group {group:?} has live embedded kafkalite.Consumer members; a consumer outside the group \
             (generation -1, member id {member_id:?}) may commit only to an empty group"
        ));
    }
    None
}

/// Who commits to a group, as OffsetCommit and TxnOffsetCommit (`transactional`) name it.
pub struct Committer<'a> {
    pub group: &'a str,
    pub member_id: &'a str,
    pub instance: Option<&'a str>,
    /// A classic group's generation, or a consumer-protocol member's epoch (KIP-848: OffsetCommit
    /// v9's generation_id_or_member_epoch, TxnOffsetCommit's generation_id).
    pub generation: i32,
    /// The request's API version.
    pub version: i16,
    pub transactional: bool,
}

impl Committer<'_> {
    /// The group coordinator's check of the commit (Kafka's GroupCoordinator validateOffsetCommit
    /// of the group's type): the embedded members' claim, then the consumer group's member epoch
    /// (`consumer_group`) or the classic group's generation (`group`). Err: the code, logged as a
    /// refusal of `api` to `peer`.
    pub fn check(&self, broker: &Broker, api: &str, peer: &str) -> Result<(), i16> {
        let Committer { group, member_id, instance, generation, version, transactional } = *self;
        if let Some(reason) = outside_commit_refused(broker, group, member_id, generation) {
            return Err(codes::refused(peer, api, codes::UNKNOWN_MEMBER_ID, &reason));
        }
        if transactional && generation < 0 && member_id.is_empty() && instance.is_none() {
            // TxnOffsetCommit before v3 names no member: Kafka lets a commit naming none
            // through to any group, one with members too (the producer's
            // sendOffsetsToTransaction(offsets, groupId)).
            return Ok(());
        }
        let verdict = match broker.consumer_groups.check_commit(group, member_id, generation, version, transactional) {
            Some(verdict) => verdict,
            None => broker.groups.check_commit_of_instance(group, member_id, instance, generation, transactional),
        };
        verdict.map_err(|code| {
            let reason = format!(
                "group {group:?} does not accept a commit from member {member_id:?} of generation (member \
                 epoch) {generation}"
            );
            codes::refused(peer, api, code, &reason)
        })
    }
}

pub fn offset_commit(broker: &Broker, request: OffsetCommitRequest, version: i16, peer: &str) -> OffsetCommitResponse {
    let group = request.group_id.0.to_string();
    let instance = super::group_api::instance_id(&request.group_instance_id);
    let committer = Committer {
        group: &group,
        member_id: &request.member_id,
        instance: instance.as_deref(),
        generation: request.generation_id_or_member_epoch,
        version,
        transactional: false,
    };
    // The group-level verdict, once: an empty id, or the coordinator's and the embedded side's.
    let verdict: Result<(), i16> = if group.is_empty() {
        Err(codes::refused(peer, "OffsetCommit", codes::INVALID_GROUP_ID, "the group id is empty"))
    } else {
        committer.check(broker, "OffsetCommit", peer)
    };
    let plan = CommitPlan::new(broker, requested!(request.topics), verdict);
    let commits: Vec<_> =
        plan.commits.iter().map(|(t, p, o, m)| (t.clone(), *p, *o, m.clone().unwrap_or_default())).collect();
    // The verdict again where the commit is written (`OffsetStore::commit`): the group may have
    // moved on while the commit waited for the offsets partition's append lock, over the network
    // or by an embedded `kafkalite.Consumer` joining (which reads its committed offsets after it
    // registered, so a commit admitted here before it registered is one it reads).
    let admit = || committer.check(broker, "OffsetCommit (checked again where it is written)", peer);
    let written = match broker.offsets.commit(broker, &group, &commits, admit) {
        Ok(verdict) => verdict,
        Err(e) => Err(codes::for_error(&e)),
    };
    let topics = plan
        .answered(written)
        .map(|(name, parts)| {
            let partitions = parts
                .map(|(index, code)| {
                    OffsetCommitResponsePartition::default().with_partition_index(index).with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default().with_name(name).with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// One group's committed offsets as OffsetFetch answers them, whichever version: per topic, the
/// partitions' (index, offset, metadata, error code).
type Fetched = Vec<(TopicName, Vec<(i32, i64, String, i16)>)>;

/// The offsets of `group` for `wanted` (topic, partitions), or every one it has (None): Kafka's
/// fetchOffsets / fetchAllOffsets. Every one it has means those of topics `who` may DESCRIBE, as
/// KafkaApis filters them (named topics are authorized one by one before, `acl_requests`).
/// Err: the group's error code.
fn fetch_group(
    broker: &Broker,
    group: &str,
    wanted: Option<Vec<(TopicName, Vec<i32>)>>,
    require_stable: bool,
    who: &Who,
) -> Result<Fetched, i16> {
    let (offsets, unstable) = broker.offsets.load_with_unstable(broker, group).map_err(|e| codes::for_error(&e))?;
    // KIP-447: a read_committed consumer (require_stable) is not told an offset a transaction
    // is still committing; UNSTABLE_OFFSET_COMMIT makes it ask again.
    let entry = |topic: &str, partition: i32| {
        let (offset, metadata) = offsets.get(&(topic.to_string(), partition)).cloned().unwrap_or((-1, String::new()));
        if require_stable && unstable.contains(&(topic.to_string(), partition)) {
            (partition, -1, metadata, codes::UNSTABLE_OFFSET_COMMIT)
        } else {
            (partition, offset, metadata, codes::NONE)
        }
    };
    Ok(match wanted {
        Some(wanted) => wanted
            .into_iter()
            .map(|(name, partitions)| {
                let topic: &str = &name;
                let fetched = partitions.iter().map(|&p| entry(topic, p)).collect();
                (name, fetched)
            })
            .collect(),
        None => {
            // Every partition the group has offsets for (v2+).
            let mut by_topic: std::collections::BTreeMap<&str, Vec<_>> = Default::default();
            for (topic, partition) in offsets.keys() {
                if broker.acls.allows(who, op::DESCRIBE, resource::TOPIC, topic) {
                    by_topic.entry(topic).or_default().push(entry(topic, *partition));
                }
            }
            by_topic
                .into_iter()
                .map(|(topic, fetched)| (TopicName(StrBytes::from_string(topic.to_string())), fetched))
                .collect()
        }
    })
}

pub fn offset_fetch(
    broker: &Broker,
    request: OffsetFetchRequest,
    version: i16,
    peer: &str,
    who: &Who,
) -> OffsetFetchResponse {
    if version >= 8 {
        // Several groups, each with its own error (v9: the member's id and epoch checked).
        let groups = request
            .groups
            .into_iter()
            .map(|g| {
                let out = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                let group = g.group_id.0.to_string();
                if let Some((code, reason)) =
                    broker.consumer_groups.check_fetch(&group, g.member_id.as_deref(), g.member_epoch)
                {
                    return out.with_error_code(codes::refused(peer, "OffsetFetch", code, &reason));
                }
                let wanted = g.topics.map(|ts| ts.into_iter().map(|t| (t.name, t.partition_indexes)).collect());
                match fetch_group(broker, &group, wanted, request.require_stable, who) {
                    Ok(fetched) => out.with_topics(
                        fetched
                            .into_iter()
                            .map(|(name, partitions)| {
                                let partitions = partitions
                                    .into_iter()
                                    .map(|(p, offset, metadata, error)| {
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(-1)
                                            .with_metadata(Some(StrBytes::from_string(metadata)))
                                            .with_error_code(error)
                                    })
                                    .collect();
                                OffsetFetchResponseTopics::default().with_name(name).with_partitions(partitions)
                            })
                            .collect(),
                    ),
                    Err(code) => out.with_error_code(code),
                }
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let group = request.group_id.0.to_string();
    let wanted = request.topics.map(|ts| ts.into_iter().map(|t| (t.name, t.partition_indexes)).collect());
    let fetched = match fetch_group(broker, &group, wanted, version >= 7 && request.require_stable, who) {
        Ok(fetched) => fetched,
        Err(code) if version >= 2 => return OffsetFetchResponse::default().with_error_code(code),
        Err(_) => return OffsetFetchResponse::default(),
    };
    let topics = fetched
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(p, offset, metadata, error)| {
                    let out = OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_metadata(Some(StrBytes::from_string(metadata)))
                        .with_error_code(error);
                    if version >= 5 {
                        out.with_committed_leader_epoch(-1)
                    } else {
                        out
                    }
                })
                .collect();
            OffsetFetchResponseTopic::default().with_name(name).with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}
