//! What a listing may show a principal: Kafka filters listings instead of refusing them.
//! Metadata leaves out topics the principal may not DESCRIBE and answers a named one
//! TOPIC_AUTHORIZATION_FAILED (also a missing one it may not CREATE, rather than creating it);
//! ListGroups lists only the groups it may DESCRIBE (all with DESCRIBE on the cluster);
//! ListTransactions only the transactional ids it may DESCRIBE. Kafka also answers these
//! per item rather than whole: FindCoordinator v4+ refuses each key it may not DESCRIBE on its
//! own, and DescribeTransactions leaves out the topics it may not DESCRIBE.

use std::collections::BTreeSet;

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::server::codes;
use crate::server::security::authorizer::{op, resource, Who, CLUSTER_NAME};
use crate::server::state::broker::Broker;

/// What a listing may show `who`: the filters of Metadata, ListGroups and ListTransactions.
pub struct Listing<'a> {
    broker: &'a Broker,
    who: &'a Who,
    peer: &'a str,
}

impl<'a> Listing<'a> {
    pub fn new(broker: &'a Broker, who: &'a Who, peer: &'a str) -> Listing<'a> {
        Listing { broker, who, peer }
    }

    /// Always true while the ACLs are not enforced: nothing is filtered then.
    fn may(&self, operation: i8, resource_type: i8, name: &str) -> bool {
        self.broker.acls.allows(self.who, operation, resource_type, name)
    }

    /// Metadata before its handler: named topics the principal may not DESCRIBE, or may not
    /// CREATE while they do not exist and would be created, are taken out of the request;
    /// returns them for `metadata_after`, with the names asked (None: every topic).
    pub fn metadata_before(&self, r: &mut MetadataRequest, version: i16) -> MetadataCut {
        let every = r.topics.as_ref().is_none_or(|t| t.is_empty() && version == 0);
        let Some(topics) = r.topics.as_mut().filter(|_| !every && self.broker.acls.enforced()) else {
            return MetadataCut { asked: None, refused: Vec::new() };
        };
        let existing = self.broker.topics().ok();
        let exists = |n: &str| existing.as_ref().is_none_or(|t| t.contains_key(n));
        let may_create =
            |n: &str| self.may(op::CREATE, resource::CLUSTER, CLUSTER_NAME) || self.may(op::CREATE, resource::TOPIC, n);
        let mut asked = BTreeSet::new();
        let mut refused = Vec::new();
        topics.retain(|t| {
            let Some(name) = t.name.as_ref().map(|n| n.to_string()) else { return true };
            asked.insert(name.clone());
            let ok = self.may(op::DESCRIBE, resource::TOPIC, &name) && (exists(&name) || may_create(&name));
            if !ok {
                refused.push(name);
            }
            ok
        });
        if !refused.is_empty() {
            let reason = format!(
                "{} from {} may not DESCRIBE (or CREATE) TOPIC {}",
                self.who.principal,
                self.who.host,
                refused.join(", ")
            );
            codes::refused(self.peer, "Metadata", codes::TOPIC_AUTHORIZATION_FAILED, &reason);
        }
        MetadataCut { asked: Some(asked), refused }
    }

    /// Metadata after its handler: only what was asked and may be described, and the refused
    /// names with TOPIC_AUTHORIZATION_FAILED.
    pub fn metadata_after(&self, cut: MetadataCut, mut response: MetadataResponse) -> MetadataResponse {
        if !self.broker.acls.enforced() {
            return response;
        }
        response.topics.retain(|t| {
            let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            cut.asked.as_ref().is_none_or(|a| a.contains(&name)) && self.may(op::DESCRIBE, resource::TOPIC, &name)
        });
        for name in cut.refused {
            response.topics.push(
                metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(name))))
                    .with_error_code(codes::TOPIC_AUTHORIZATION_FAILED)
                    .with_topic_authorized_operations(i32::MIN),
            );
        }
        response
    }

    /// ListGroups: every group with DESCRIBE on the cluster, else those it may DESCRIBE.
    pub fn list_groups(&self, mut response: ListGroupsResponse) -> ListGroupsResponse {
        if self.broker.acls.enforced() && !self.may(op::DESCRIBE, resource::CLUSTER, CLUSTER_NAME) {
            response.groups.retain(|g| self.may(op::DESCRIBE, resource::GROUP, &g.group_id));
        }
        response
    }

    /// FindCoordinator v4+ (KafkaApis' `getCoordinator`, per key): the code of a key the
    /// principal may not DESCRIBE (as a group, or a transactional id), logged; None: served.
    pub fn coordinator_refusal(&self, key_type: i8, key: &str) -> Option<i16> {
        let (resource_type, code, noun) = match key_type {
            0 => (resource::GROUP, codes::GROUP_AUTHORIZATION_FAILED, "GROUP"),
            1 => (resource::TRANSACTIONAL_ID, codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "TRANSACTIONAL_ID"),
            _ => return None, // refused as a type it does not serve
        };
        if !self.broker.acls.enforced() || self.may(op::DESCRIBE, resource_type, key) {
            return None;
        }
        let reason = format!("{} from {} may not DESCRIBE {noun} {key}", self.who.principal, self.who.host);
        Some(codes::refused(self.peer, "FindCoordinator", code, &reason))
    }

    /// DescribeTransactions (KafkaApis' `handleDescribeTransactionsRequest`): a described
    /// transaction lists only the topics the principal may DESCRIBE.
    pub fn describe_transactions(&self, mut response: DescribeTransactionsResponse) -> DescribeTransactionsResponse {
        if self.broker.acls.enforced() {
            for state in &mut response.transaction_states {
                state.topics.retain(|t| self.may(op::DESCRIBE, resource::TOPIC, &t.topic));
            }
        }
        response
    }

    /// ListTransactions: the transactional ids it may DESCRIBE.
    pub fn list_transactions(&self, mut response: ListTransactionsResponse) -> ListTransactionsResponse {
        if self.broker.acls.enforced() {
            let may = |t: &list_transactions_response::TransactionState| {
                self.may(op::DESCRIBE, resource::TRANSACTIONAL_ID, &t.transactional_id)
            };
            response.transaction_states.retain(may);
        }
        response
    }
}

/// Metadata's named topics (None: all) and those refused before the handler ran.
pub struct MetadataCut {
    asked: Option<BTreeSet<String>>,
    refused: Vec<String>,
}
