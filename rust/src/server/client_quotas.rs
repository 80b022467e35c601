//! DescribeClientQuotas and AlterClientQuotas. kafkalite throttles no client (it has no quota
//! manager), so there is never a quota to describe: DescribeClientQuotas answers a valid filter
//! with no entries, which is what `kafka-configs --describe --entity-type users` asks before it
//! describes the SCRAM credentials. AlterClientQuotas is refused per entry with
//! INVALID_REQUEST (not retriable) and a message saying so, rather than storing a quota that
//! would not be enforced. Who may call them (DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster, as
//! Kafka) is checked in `acl_requests`.

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::codes;

/// Kafka's quota entity types (`ClientQuotaEntity`).
const ENTITY_TYPES: [&str; 3] = ["user", "client-id", "ip"];
/// Kafka's `ClientQuotaFilterComponent` match types: exact name, the default, any specified.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

const NO_QUOTAS: &str = "kafkalite serve has no client quotas (it throttles no client); nothing was stored";

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Why Kafka would refuse the filter, if it would.
fn invalid_filter(r: &DescribeClientQuotasRequest) -> Option<String> {
    for c in &r.components {
        if !ENTITY_TYPES.contains(&c.entity_type.as_str()) {
            return Some(format!("Custom entity type '{}' not supported", c.entity_type.as_str()));
        }
        match (c.match_type, &c._match) {
            (MATCH_EXACT, Some(_)) | (MATCH_DEFAULT | MATCH_SPECIFIED, None) => {}
            (MATCH_EXACT, None) => return Some("Exact match requires a name".into()),
            (MATCH_DEFAULT | MATCH_SPECIFIED, Some(_)) => {
                return Some(format!("Match type {} takes no name", c.match_type))
            }
            (other, _) => return Some(format!("Unknown match type {other}")),
        }
    }
    let types: Vec<&str> = r.components.iter().map(|c| c.entity_type.as_str()).collect();
    if (1..types.len()).any(|i| types[..i].contains(&types[i])) {
        return Some("Duplicate entity type in the filter".into());
    }
    None
}

pub fn describe_client_quotas(r: DescribeClientQuotasRequest, peer: &str) -> DescribeClientQuotasResponse {
    if let Some(why) = invalid_filter(&r) {
        return describe_refused(codes::refused(peer, "DescribeClientQuotas", codes::INVALID_REQUEST, &why), &why);
    }
    DescribeClientQuotasResponse::default().with_entries(Some(Vec::new()))
}

/// DescribeClientQuotas answered `code` (Kafka's top-level error; no entries).
pub fn describe_refused(code: i16, why: &str) -> DescribeClientQuotasResponse {
    DescribeClientQuotasResponse::default().with_error_code(code).with_error_message(Some(text(why)))
}

pub fn alter_client_quotas(r: AlterClientQuotasRequest, peer: &str) -> AlterClientQuotasResponse {
    if !r.entries.is_empty() {
        codes::refused(peer, "AlterClientQuotas", codes::INVALID_REQUEST, NO_QUOTAS);
    }
    alter_refused(&r, codes::INVALID_REQUEST, NO_QUOTAS)
}

/// AlterClientQuotas answered `code` on every entry it names.
pub fn alter_refused(r: &AlterClientQuotasRequest, code: i16, why: &str) -> AlterClientQuotasResponse {
    let entries = r
        .entries
        .iter()
        .map(|e| {
            let entity = e
                .entity
                .iter()
                .map(|d| {
                    EntityData::default()
                        .with_entity_type(d.entity_type.clone())
                        .with_entity_name(d.entity_name.clone())
                })
                .collect();
            EntryData::default().with_error_code(code).with_error_message(Some(text(why))).with_entity(entity)
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}
