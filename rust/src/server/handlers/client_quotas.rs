//! DescribeClientQuotas and AlterClientQuotas over the data directory's client quotas
//! (`crate::coordination::quotas`), which the server enforces (`quotas`). Describe answers from the quotas in
//! memory with Kafka's filter semantics (exact name, default, any specified; `strict`: no other
//! entity type); Alter validates each entry as Kafka does (its entity, then each key and value),
//! answers each entry's error on its own, and with `validate_only` changes nothing. Who may call
//! them (DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster, as Kafka) is checked in `acl_requests`.

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::describe_client_quotas_response as described;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::coordination::quotas::{matches, Change, Entity, Match};
use crate::server::codes;
use crate::server::state::broker::Broker;

/// Kafka's quota entity types (`ClientQuotaEntity`).
const ENTITY_TYPES: [&str; 3] =
    [crate::coordination::quotas::USER, crate::coordination::quotas::CLIENT_ID, crate::coordination::quotas::IP];
/// Kafka's `ClientQuotaFilterComponent` match types: exact name, the default, any specified.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Why Kafka would refuse the filter, if it would: the error code and message of
/// `ClientQuotasImage.describe` (an unknown entity type is UNSUPPORTED_VERSION, the rest
/// INVALID_REQUEST).
fn invalid_filter(r: &DescribeClientQuotasRequest) -> Option<(i16, String)> {
    let invalid = |why: String| Some((codes::INVALID_REQUEST, why));
    for (i, c) in r.components.iter().enumerate() {
        let kind = c.entity_type.as_str();
        if kind.is_empty() {
            return invalid("Invalid empty entity type.".into());
        }
        if r.components[..i].iter().any(|e| e.entity_type.as_str() == kind) {
            return invalid(format!("Entity type {kind} cannot appear more than once in the filter."));
        }
        if !ENTITY_TYPES.contains(&kind) {
            return Some((codes::UNSUPPORTED_VERSION, format!("Unsupported entity type {kind}")));
        }
        match (c.match_type, &c._match) {
            (MATCH_EXACT, Some(_)) | (MATCH_DEFAULT | MATCH_SPECIFIED, None) => {}
            (MATCH_EXACT, None) => {
                return invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.".into())
            }
            (MATCH_DEFAULT, Some(_)) => {
                return invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.".into())
            }
            (MATCH_SPECIFIED, Some(_)) => {
                return invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.".into())
            }
            (other, _) => return invalid(format!("Unknown match type {other}")),
        }
    }
    let has = |kind: &str| r.components.iter().any(|c| c.entity_type.as_str() == kind);
    if has(crate::coordination::quotas::IP)
        && (has(crate::coordination::quotas::USER) || has(crate::coordination::quotas::CLIENT_ID))
    {
        return invalid(
            "Invalid entity filter component combination. IP filter component should not be used with user or \
             clientId filter component."
                .into(),
        );
    }
    None
}

pub fn describe_client_quotas(
    broker: &Broker,
    r: DescribeClientQuotasRequest,
    peer: &str,
) -> DescribeClientQuotasResponse {
    if let Some((code, why)) = invalid_filter(&r) {
        return describe_refused(codes::refused(peer, "DescribeClientQuotas", code, &why), &why);
    }
    let components: Vec<(&str, Match)> = r
        .components
        .iter()
        .map(|c| {
            let m = match (c.match_type, &c._match) {
                (MATCH_EXACT, Some(name)) => Match::Exact(name.to_string()),
                (MATCH_DEFAULT, _) => Match::Default,
                _ => Match::Specified,
            };
            (c.entity_type.as_str(), m)
        })
        .collect();
    let entries = broker
        .quotas
        .current()
        .iter()
        .filter(|(entity, _)| matches(entity, &components, r.strict))
        .map(|(entity, values)| {
            let entity = entity
                .parts()
                .into_iter()
                .map(|(kind, name)| {
                    described::EntityData::default().with_entity_type(text(kind)).with_entity_name(name.map(text))
                })
                .collect();
            let values =
                values.iter().map(|(k, v)| described::ValueData::default().with_key(text(k)).with_value(*v)).collect();
            described::EntryData::default().with_entity(entity).with_values(values)
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

/// DescribeClientQuotas answered `code` (Kafka's top-level error; no entries).
pub fn describe_refused(code: i16, why: &str) -> DescribeClientQuotasResponse {
    DescribeClientQuotasResponse::default().with_error_code(code).with_error_message(Some(text(why)))
}

/// One entry's changes, or why Kafka refuses the entry (`ClientQuotaControlManager`).
fn changes(e: &kafka_protocol::messages::alter_client_quotas_request::EntryData) -> Result<Vec<Change>, String> {
    let entity = Entity::from_parts(e.entity.iter().map(|d| (d.entity_type.as_str(), d.entity_name.as_deref())))?;
    let mut out: Vec<Change> = Vec::new();
    for op in &e.ops {
        let key = op.key.to_string();
        if out.iter().any(|(_, k, _)| *k == key) {
            return Err(format!("Duplicate quota key {key} in the entry"));
        }
        if op.remove {
            // Kafka checks the key even of a removal.
            if let Some(why) = entity.invalid_value(&key, 1.0) {
                return Err(why);
            }
            out.push((entity.clone(), key, None));
        } else {
            if let Some(why) = entity.invalid_value(&key, op.value) {
                return Err(why);
            }
            out.push((entity.clone(), key, Some(op.value)));
        }
    }
    Ok(out)
}

pub fn alter_client_quotas(broker: &Broker, r: AlterClientQuotasRequest, peer: &str) -> AlterClientQuotasResponse {
    let checked: Vec<Result<Vec<Change>, String>> = r.entries.iter().map(changes).collect();
    let valid: Vec<Change> = checked.iter().filter_map(|c| c.as_ref().ok()).flatten().cloned().collect();
    let stored = if r.validate_only || valid.is_empty() {
        Ok(())
    } else {
        crate::coordination::quotas::alter(broker.dir.path(), &valid).map(|quotas| broker.quotas.adopt(quotas))
    };
    let entries = r
        .entries
        .iter()
        .zip(&checked)
        .map(|(e, checked)| {
            let (code, why) = match (checked, &stored) {
                (Err(why), _) => {
                    (codes::refused(peer, "AlterClientQuotas", codes::INVALID_REQUEST, why), Some(why.clone()))
                }
                (Ok(_), Err(err)) => {
                    let why = err.to_string();
                    (codes::refused(peer, "AlterClientQuotas", codes::for_error(err), &why), Some(why))
                }
                (Ok(_), Ok(())) => (codes::NONE, None),
            };
            EntryData::default()
                .with_error_code(code)
                .with_error_message(why.as_deref().map(text))
                .with_entity(entity_data(e))
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

fn entity_data(e: &kafka_protocol::messages::alter_client_quotas_request::EntryData) -> Vec<EntityData> {
    e.entity
        .iter()
        .map(|d| EntityData::default().with_entity_type(d.entity_type.clone()).with_entity_name(d.entity_name.clone()))
        .collect()
}

/// AlterClientQuotas answered `code` on every entry it names.
pub fn alter_refused(r: &AlterClientQuotasRequest, code: i16, why: &str) -> AlterClientQuotasResponse {
    let entries = r
        .entries
        .iter()
        .map(|e| {
            EntryData::default().with_error_code(code).with_error_message(Some(text(why))).with_entity(entity_data(e))
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}
