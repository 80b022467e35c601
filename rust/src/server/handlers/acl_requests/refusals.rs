//! The answer of a refused request: every item it names, with the error code (Kafka's
//! `AbstractRequest.getErrorResponse`). One builder per API (`ErrorResponse`), used both for a
//! request refused whole (`refusal`) and for the topics `check` took out of a served request,
//! added to the handler's response with TOPIC_AUTHORIZATION_FAILED (`Refused`).
//!
//! One role, whose length is the number of APIs that can be refused (38): each builder is the
//! shape of its API's response, most of them `per_partition` or one result per named item.

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::server::codes;
use crate::server::handlers::{client_quotas, scram_admin};
use crate::server::request::{Body, DecodeError, Request};
use crate::server::state::metrics::{frame, ErrorCodes};

/// A request answered `code` on every item it names, at version `v` (some versions carry an
/// error message, some a top-level code instead of per-item ones).
pub(super) trait ErrorResponse {
    type Response: Encodable + ErrorCodes;
    fn error_response(&self, code: i16, v: i16) -> Self::Response;
}

/// The error message of a refusal, where the version has one.
fn named(code: i16, message: bool) -> Option<StrBytes> {
    message.then(|| StrBytes::from_string(format!("{} ({code})", codes::name(code))))
}

/// `request` answered with `code` on every item it names, framed.
pub(super) fn refusal(request: &Request, code: i16) -> Result<Bytes, DecodeError> {
    let (key, v, id) = (request.key, request.header.request_api_version, request.header.correlation_id);
    fn framed<R: ErrorResponse>(r: &R, code: i16, (key, v, id): (ApiKey, i16, i32)) -> Result<Bytes, DecodeError> {
        frame(key, v, id, &r.error_response(code, v))
    }
    let at = (key, v, id);
    match &request.body {
        Body::Produce(r) => framed(r, code, at),
        Body::Fetch(r) => framed(r, code, at),
        Body::ListOffsets(r) => framed(r, code, at),
        Body::CreateTopics(r) => framed(r, code, at),
        Body::FindCoordinator(r) => framed(r, code, at),
        Body::OffsetCommit(r) => framed(r, code, at),
        Body::OffsetFetch(r) => framed(r, code, at),
        Body::JoinGroup(r) => framed(r, code, at),
        Body::SyncGroup(r) => framed(r, code, at),
        Body::Heartbeat(r) => framed(r, code, at),
        Body::ConsumerGroupHeartbeat(r) => framed(r, code, at),
        Body::ConsumerGroupDescribe(r) => framed(r, code, at),
        Body::LeaveGroup(r) => framed(r, code, at),
        Body::DescribeGroups(r) => framed(r, code, at),
        Body::InitProducerId(r) => framed(r, code, at),
        Body::AddPartitionsToTxn(r) => framed(r, code, at),
        Body::AddOffsetsToTxn(r) => framed(r, code, at),
        Body::EndTxn(r) => framed(r, code, at),
        Body::TxnOffsetCommit(r) => framed(r, code, at),
        Body::DescribeProducers(r) => framed(r, code, at),
        Body::DescribeTransactions(r) => framed(r, code, at),
        Body::DeleteGroups(r) => framed(r, code, at),
        Body::DeleteTopics(r) => framed(r, code, at),
        Body::CreatePartitions(r) => framed(r, code, at),
        Body::DescribeConfigs(r) => framed(r, code, at),
        Body::AlterConfigs(r) => framed(r, code, at),
        Body::IncrementalAlterConfigs(r) => framed(r, code, at),
        Body::DeleteRecords(r) => framed(r, code, at),
        Body::DescribeCluster(r) => framed(r, code, at),
        Body::OffsetDelete(r) => framed(r, code, at),
        Body::DescribeLogDirs(r) => framed(r, code, at),
        Body::CreateAcls(r) => framed(r, code, at),
        Body::DeleteAcls(r) => framed(r, code, at),
        Body::DescribeAcls(r) => framed(r, code, at),
        Body::AlterUserScramCredentials(r) => framed(r, code, at),
        Body::DescribeUserScramCredentials(r) => framed(r, code, at),
        Body::AlterClientQuotas(r) => framed(r, code, at),
        Body::DescribeClientQuotas(r) => framed(r, code, at),
        Body::Metadata(_)
        | Body::ListGroups(_)
        | Body::ListTransactions(_)
        | Body::ApiVersions(_)
        | Body::ApiVersionsUnsupported
        | Body::SaslHandshake(_)
        | Body::SaslAuthenticate(_) => Err(DecodeError(format!("{key:?} is never refused whole (a bug)"))),
    }
}

/// The topics taken out of a request before its handler ran (`check`), with the request's
/// version, answered TOPIC_AUTHORIZATION_FAILED in the handler's response by the same
/// builders as a whole refusal.
pub struct Refused(pub(super) Option<(Body, i16)>);

const TOPIC_REFUSED: i16 = codes::TOPIC_AUTHORIZATION_FAILED;

impl Refused {
    pub fn produce(&self, mut response: ProduceResponse) -> ProduceResponse {
        if let Some((Body::Produce(r), v)) = &self.0 {
            response.responses.extend(r.error_response(TOPIC_REFUSED, *v).responses);
        }
        response
    }

    /// Fetch's refused topics, for `fetch::answer` to add before it frames its response.
    pub fn fetch(&self) -> Vec<fetch_response::FetchableTopicResponse> {
        match &self.0 {
            Some((Body::Fetch(r), v)) => r.error_response(TOPIC_REFUSED, *v).responses,
            _ => Vec::new(),
        }
    }

    pub fn list_offsets(&self, mut response: ListOffsetsResponse) -> ListOffsetsResponse {
        if let Some((Body::ListOffsets(r), v)) = &self.0 {
            response.topics.extend(r.error_response(TOPIC_REFUSED, *v).topics);
        }
        response
    }

    pub fn create_topics(&self, mut response: CreateTopicsResponse) -> CreateTopicsResponse {
        if let Some((Body::CreateTopics(r), v)) = &self.0 {
            response.topics.extend(r.error_response(TOPIC_REFUSED, *v).topics);
        }
        response
    }

    pub fn delete_topics(&self, mut response: DeleteTopicsResponse) -> DeleteTopicsResponse {
        if let Some((Body::DeleteTopics(r), v)) = &self.0 {
            response.responses.extend(r.error_response(TOPIC_REFUSED, *v).responses);
        }
        response
    }

    pub fn delete_records(&self, mut response: DeleteRecordsResponse) -> DeleteRecordsResponse {
        if let Some((Body::DeleteRecords(r), v)) = &self.0 {
            response.topics.extend(r.error_response(TOPIC_REFUSED, *v).topics);
        }
        response
    }

    pub fn offset_commit(&self, mut response: OffsetCommitResponse) -> OffsetCommitResponse {
        if let Some((Body::OffsetCommit(r), v)) = &self.0 {
            response.topics.extend(r.error_response(TOPIC_REFUSED, *v).topics);
        }
        response
    }

    /// OffsetFetch's refused topics with the code on each partition: before v8 beside the
    /// group's answer (a whole refusal of v2+ is the group's code), from v8 in their group's
    /// answer unless the group itself was refused (Kafka).
    pub fn offset_fetch(&self, mut response: OffsetFetchResponse) -> OffsetFetchResponse {
        if let Some((Body::OffsetFetch(r), _)) = &self.0 {
            response.topics.extend(offset_fetch_topics(r, TOPIC_REFUSED));
            for denied in &r.groups {
                let Some(g) = response.groups.iter_mut().find(|g| g.group_id == denied.group_id) else { continue };
                if g.error_code == codes::NONE {
                    g.topics.extend(offset_fetch_group_topics(denied, TOPIC_REFUSED));
                }
            }
        }
        response
    }
}

/// Every partition of every topic answered: `partition` builds each partition's answer,
/// `topic` a topic's from them. The shape of the per-partition APIs' responses.
fn per_partition<'a, T, P, I, PA, TA>(
    topics: &'a [T],
    partitions: impl Fn(&'a T) -> I,
    partition: impl Fn(P) -> PA,
    topic: impl Fn(&'a T, Vec<PA>) -> TA,
) -> Vec<TA>
where
    I: IntoIterator<Item = P>,
{
    topics.iter().map(|t| topic(t, partitions(t).into_iter().map(&partition).collect())).collect()
}

/// `ErrorResponse` for each request type: `|r, code, v| answer` (as `metrics`' `error_codes!`).
macro_rules! error_response {
    ($($request:ty => $response:ty = |$r:ident, $code:ident, $v:pat_param| $body:expr;)*) => {$(
        impl ErrorResponse for $request {
            type Response = $response;
            fn error_response(&self, $code: i16, $v: i16) -> $response {
                let $r = self;
                $body
            }
        }
    )*};
}

error_response! {
    SyncGroupRequest => SyncGroupResponse = |_r, code, _| SyncGroupResponse::default().with_error_code(code);
    HeartbeatRequest => HeartbeatResponse = |_r, code, _| HeartbeatResponse::default().with_error_code(code);
    LeaveGroupRequest => LeaveGroupResponse = |_r, code, _| LeaveGroupResponse::default().with_error_code(code);
    AddOffsetsToTxnRequest => AddOffsetsToTxnResponse =
        |_r, code, _| AddOffsetsToTxnResponse::default().with_error_code(code);
    OffsetDeleteRequest => OffsetDeleteResponse = |_r, code, _| OffsetDeleteResponse::default().with_error_code(code);
    DescribeLogDirsRequest => DescribeLogDirsResponse =
        |_r, code, _| DescribeLogDirsResponse::default().with_error_code(code);
    ProduceRequest => ProduceResponse = |r, code, _| {
        let topics = per_partition(
            &r.topic_data,
            |t| &t.partition_data,
            |p| {
                produce_response::PartitionProduceResponse::default()
                    .with_index(p.index)
                    .with_error_code(code)
                    .with_base_offset(-1)
                    .with_log_append_time_ms(-1)
                    .with_log_start_offset(-1)
            },
            |t, parts| {
                let topic = produce_response::TopicProduceResponse::default().with_name(t.name.clone());
                topic.with_partition_responses(parts)
            },
        );
        ProduceResponse::default().with_responses(topics)
    };
    FetchRequest => FetchResponse = |r, code, _| {
        let topics = per_partition(
            &r.topics,
            |t| &t.partitions,
            |p| {
                fetch_response::PartitionData::default()
                    .with_partition_index(p.partition)
                    .with_error_code(code)
                    .with_high_watermark(-1)
                    .with_last_stable_offset(-1)
                    .with_log_start_offset(-1)
            },
            |t, parts| {
                let topic = fetch_response::FetchableTopicResponse::default().with_topic(t.topic.clone());
                topic.with_topic_id(t.topic_id).with_partitions(parts)
            },
        );
        FetchResponse::default().with_responses(topics)
    };
    ListOffsetsRequest => ListOffsetsResponse = |r, code, _| {
        let topics = per_partition(
            &r.topics,
            |t| &t.partitions,
            |p| {
                list_offsets_response::ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code)
                    .with_timestamp(-1)
                    .with_offset(-1)
            },
            |t, parts| {
                let topic = list_offsets_response::ListOffsetsTopicResponse::default().with_name(t.name.clone());
                topic.with_partitions(parts)
            },
        );
        ListOffsetsResponse::default().with_topics(topics)
    };
    CreateTopicsRequest => CreateTopicsResponse = |r, code, v| {
        let topics = r.topics.iter().map(|t| {
            create_topics_response::CreatableTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(code)
                .with_error_message(named(code, v >= 1))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
        });
        CreateTopicsResponse::default().with_topics(topics.collect())
    };
    FindCoordinatorRequest => FindCoordinatorResponse = |r, code, v| {
        let coordinators = r.coordinator_keys.iter().map(|k| {
            find_coordinator_response::Coordinator::default()
                .with_key(k.clone())
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(code)
                .with_error_message(named(code, true))
        });
        if v >= 4 {
            // v4+ has no top-level node: setting one would fail the encoding (no answer at all).
            return FindCoordinatorResponse::default().with_coordinators(coordinators.collect());
        }
        FindCoordinatorResponse::default()
            .with_error_code(code)
            .with_error_message(named(code, v >= 1))
            .with_node_id(BrokerId(-1))
            .with_port(-1)
    };
    OffsetCommitRequest => OffsetCommitResponse = |r, code, _| {
        let topics = per_partition(
            &r.topics,
            |t| &t.partitions,
            |p| {
                let partition = offset_commit_response::OffsetCommitResponsePartition::default();
                partition.with_partition_index(p.partition_index).with_error_code(code)
            },
            |t, parts| {
                let topic = offset_commit_response::OffsetCommitResponseTopic::default().with_name(t.name.clone());
                topic.with_partitions(parts)
            },
        );
        OffsetCommitResponse::default().with_topics(topics)
    };
    OffsetFetchRequest => OffsetFetchResponse = |r, code, v| {
        let groups = r.groups.iter().map(|g| {
            let group = offset_fetch_response::OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
            group.with_error_code(code)
        });
        let body = OffsetFetchResponse::default().with_groups(groups.collect());
        if v >= 2 {
            body.with_error_code(code)
        } else {
            // v1 has no top-level code: every asked partition carries it.
            body.with_topics(offset_fetch_topics(r, code))
        }
    };
    JoinGroupRequest => JoinGroupResponse = |r, code, v| {
        JoinGroupResponse::default()
            .with_error_code(code)
            .with_generation_id(-1)
            .with_member_id(r.member_id.clone())
            .with_protocol_name((v < 7).then(StrBytes::default))
    };
    ConsumerGroupHeartbeatRequest => ConsumerGroupHeartbeatResponse = |_r, code, _| {
        ConsumerGroupHeartbeatResponse::default().with_error_code(code).with_error_message(named(code, true))
    };
    ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse = |r, code, _| {
        let groups = r.group_ids.iter().map(|g| {
            consumer_group_describe_response::DescribedGroup::default().with_group_id(g.clone()).with_error_code(code)
        });
        ConsumerGroupDescribeResponse::default().with_groups(groups.collect())
    };
    DescribeGroupsRequest => DescribeGroupsResponse = |r, code, _| {
        let groups = r.groups.iter().map(|g| {
            describe_groups_response::DescribedGroup::default()
                .with_group_id(g.clone())
                .with_error_code(code)
                .with_authorized_operations(i32::MIN)
        });
        DescribeGroupsResponse::default().with_groups(groups.collect())
    };
    InitProducerIdRequest => InitProducerIdResponse = |_r, code, _| {
        InitProducerIdResponse::default().with_error_code(code).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
    };
    AddPartitionsToTxnRequest => AddPartitionsToTxnResponse = |r, code, v| {
        let topic_results = |topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic]| {
            per_partition(
                topics,
                |t| &t.partitions,
                |&p| {
                    add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(p)
                        .with_partition_error_code(code)
                },
                |t, parts| {
                    add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default()
                        .with_name(t.name.clone())
                        .with_results_by_partition(parts)
                },
            )
        };
        if v < 4 {
            let topics = topic_results(&r.v3_and_below_topics);
            return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics);
        }
        let results = r.transactions.iter().map(|t| {
            add_partitions_to_txn_response::AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(topic_results(&t.topics))
        });
        AddPartitionsToTxnResponse::default().with_error_code(code).with_results_by_transaction(results.collect())
    };
    EndTxnRequest => EndTxnResponse = |_r, code, _| {
        EndTxnResponse::default().with_error_code(code).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
    };
    TxnOffsetCommitRequest => TxnOffsetCommitResponse = |r, code, _| {
        let topics = per_partition(
            &r.topics,
            |t| &t.partitions,
            |p| {
                let partition = txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                partition.with_partition_index(p.partition_index).with_error_code(code)
            },
            |t, parts| {
                let topic = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                topic.with_name(t.name.clone()).with_partitions(parts)
            },
        );
        TxnOffsetCommitResponse::default().with_topics(topics)
    };
    DescribeProducersRequest => DescribeProducersResponse = |r, code, _| {
        let topics = per_partition(
            &r.topics,
            |t| &t.partition_indexes,
            |&p| {
                describe_producers_response::PartitionResponse::default()
                    .with_partition_index(p)
                    .with_error_code(code)
                    .with_error_message(named(code, true))
            },
            |t, parts| {
                describe_producers_response::TopicResponse::default().with_name(t.name.clone()).with_partitions(parts)
            },
        );
        DescribeProducersResponse::default().with_topics(topics)
    };
    DescribeTransactionsRequest => DescribeTransactionsResponse = |r, code, _| {
        let states = r.transactional_ids.iter().map(|t| {
            describe_transactions_response::TransactionState::default()
                .with_transactional_id(t.clone())
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        });
        DescribeTransactionsResponse::default().with_transaction_states(states.collect())
    };
    DeleteGroupsRequest => DeleteGroupsResponse = |r, code, _| {
        let results = r.groups_names.iter().map(|g| {
            delete_groups_response::DeletableGroupResult::default().with_group_id(g.clone()).with_error_code(code)
        });
        DeleteGroupsResponse::default().with_results(results.collect())
    };
    DeleteTopicsRequest => DeleteTopicsResponse = |r, code, v| {
        let by_state = r.topics.iter().map(|t| (t.name.clone(), t.topic_id));
        let by_name = r.topic_names.iter().map(|n| (Some(n.clone()), Default::default()));
        let results = by_state.chain(by_name).map(|(name, topic_id)| {
            delete_topics_response::DeletableTopicResult::default()
                .with_name(name)
                .with_topic_id(topic_id)
                .with_error_code(code)
                .with_error_message(named(code, v >= 5))
        });
        DeleteTopicsResponse::default().with_responses(results.collect())
    };
    CreatePartitionsRequest => CreatePartitionsResponse = |r, code, _| {
        let results = r.topics.iter().map(|t| {
            create_partitions_response::CreatePartitionsTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(code)
                .with_error_message(named(code, true))
        });
        CreatePartitionsResponse::default().with_results(results.collect())
    };
    DescribeConfigsRequest => DescribeConfigsResponse = |r, code, _| {
        let results = r.resources.iter().map(|c| {
            describe_configs_response::DescribeConfigsResult::default()
                .with_resource_type(c.resource_type)
                .with_resource_name(c.resource_name.clone())
                .with_error_code(code)
                .with_error_message(named(code, true))
        });
        DescribeConfigsResponse::default().with_results(results.collect())
    };
    AlterConfigsRequest => AlterConfigsResponse = |r, code, _| {
        let kinds = r.resources.iter().map(|c| (c.resource_type, c.resource_name.clone()));
        AlterConfigsResponse::default().with_responses(alter_results(kinds, code))
    };
    IncrementalAlterConfigsRequest => IncrementalAlterConfigsResponse = |r, code, _| {
        let kinds = r.resources.iter().map(|c| (c.resource_type, c.resource_name.clone()));
        let results = alter_results(kinds, code).into_iter().map(|a| {
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(a.resource_type)
                .with_resource_name(a.resource_name)
                .with_error_code(a.error_code)
                .with_error_message(a.error_message)
        });
        IncrementalAlterConfigsResponse::default().with_responses(results.collect())
    };
    DeleteRecordsRequest => DeleteRecordsResponse = |r, code, _| {
        let topics = per_partition(
            &r.topics,
            |t| &t.partitions,
            |p| {
                delete_records_response::DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_low_watermark(-1)
                    .with_error_code(code)
            },
            |t, parts| {
                let topic = delete_records_response::DeleteRecordsTopicResult::default().with_name(t.name.clone());
                topic.with_partitions(parts)
            },
        );
        DeleteRecordsResponse::default().with_topics(topics)
    };
    DescribeClusterRequest => DescribeClusterResponse = |_r, code, _| {
        DescribeClusterResponse::default()
            .with_error_code(code)
            .with_error_message(named(code, true))
            .with_controller_id(BrokerId(-1))
    };
    CreateAclsRequest => CreateAclsResponse = |r, code, _| {
        let results = r.creations.iter().map(|_| {
            let result = create_acls_response::AclCreationResult::default();
            result.with_error_code(code).with_error_message(named(code, true))
        });
        CreateAclsResponse::default().with_results(results.collect())
    };
    DeleteAclsRequest => DeleteAclsResponse = |r, code, _| {
        let results = r.filters.iter().map(|_| {
            let result = delete_acls_response::DeleteAclsFilterResult::default();
            result.with_error_code(code).with_error_message(named(code, true))
        });
        DeleteAclsResponse::default().with_filter_results(results.collect())
    };
    DescribeAclsRequest => DescribeAclsResponse = |_r, code, _| {
        DescribeAclsResponse::default().with_error_code(code).with_error_message(named(code, true))
    };
    AlterUserScramCredentialsRequest => AlterUserScramCredentialsResponse =
        |r, code, _| scram_admin::alter_refused(r, code);
    DescribeUserScramCredentialsRequest => DescribeUserScramCredentialsResponse =
        |_r, code, _| scram_admin::describe_refused(code);
    AlterClientQuotasRequest => AlterClientQuotasResponse =
        |r, code, _| client_quotas::alter_refused(r, code, codes::name(code));
    DescribeClientQuotasRequest => DescribeClientQuotasResponse =
        |_r, code, _| client_quotas::describe_refused(code, codes::name(code));
}

/// OffsetFetch's (v0-v7) `topics` answered `code` on every partition they name.
fn offset_fetch_topics(r: &OffsetFetchRequest, code: i16) -> Vec<offset_fetch_response::OffsetFetchResponseTopic> {
    per_partition(
        r.topics.as_deref().unwrap_or_default(),
        |t| &t.partition_indexes,
        |&p| {
            let partition = offset_fetch_response::OffsetFetchResponsePartition::default().with_partition_index(p);
            partition.with_committed_offset(-1).with_error_code(code)
        },
        |t, parts| {
            offset_fetch_response::OffsetFetchResponseTopic::default().with_name(t.name.clone()).with_partitions(parts)
        },
    )
}

/// OffsetFetch's (v8+) topics of one group answered `code` on every partition they name.
fn offset_fetch_group_topics(
    g: &offset_fetch_request::OffsetFetchRequestGroup,
    code: i16,
) -> Vec<offset_fetch_response::OffsetFetchResponseTopics> {
    per_partition(
        g.topics.as_deref().unwrap_or_default(),
        |t| &t.partition_indexes,
        |&p| {
            let partition = offset_fetch_response::OffsetFetchResponsePartitions::default().with_partition_index(p);
            partition.with_committed_offset(-1).with_committed_leader_epoch(-1).with_error_code(code)
        },
        |t, parts| {
            offset_fetch_response::OffsetFetchResponseTopics::default().with_name(t.name.clone()).with_partitions(parts)
        },
    )
}

/// AlterConfigs' answer for `resources` (type, name), also IncrementalAlterConfigs' shape.
fn alter_results(
    resources: impl Iterator<Item = (i8, StrBytes)>,
    code: i16,
) -> Vec<alter_configs_response::AlterConfigsResourceResponse> {
    resources
        .map(|(kind, name)| {
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(kind)
                .with_resource_name(name)
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(codes::name(code).to_string())))
        })
        .collect()
}
