//! CreateAcls, DescribeAcls and DeleteAcls (`kafka-acls`, Admin's createAcls/describeAcls/
//! deleteAcls) over the data directory's ACLs (`authorizer`). Who may call them (ALTER or
//! DESCRIBE on the cluster) is checked with every other API in `acl_requests`.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::server::codes;
use crate::server::security::authorizer::{Acl, AclFilter};
use crate::server::state::broker::Broker;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn opt(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

pub fn create_acls(broker: &Broker, r: CreateAclsRequest, peer: &str) -> CreateAclsResponse {
    let asked: Vec<Acl> = r
        .creations
        .iter()
        .map(|c| Acl {
            resource_type: c.resource_type,
            name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission: c.permission_type,
        })
        .collect();
    let mut results: Vec<(i16, Option<String>)> = asked
        .iter()
        .map(|a| match a.invalid() {
            Some(why) => (codes::refused(peer, "CreateAcls", codes::INVALID_REQUEST, &why), Some(why)),
            None => (codes::NONE, None),
        })
        .collect();
    let valid: Vec<Acl> =
        asked.iter().zip(&results).filter(|(_, (code, _))| *code == codes::NONE).map(|(a, _)| a.clone()).collect();
    if !valid.is_empty() {
        if let Err(e) = broker.acls.create(&valid) {
            let why = format!("cannot store the ACLs: {e}");
            for result in results.iter_mut().filter(|(code, _)| *code == codes::NONE) {
                *result = (codes::refused(peer, "CreateAcls", codes::UNKNOWN_SERVER_ERROR, &why), Some(why.clone()));
            }
        }
    }
    let results = results
        .into_iter()
        .map(|(code, why)| {
            AclCreationResult::default().with_error_code(code).with_error_message(why.as_deref().map(text))
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

pub fn describe_acls(broker: &Broker, r: DescribeAclsRequest, peer: &str) -> DescribeAclsResponse {
    let filter = AclFilter {
        resource_type: r.resource_type_filter,
        name: opt(&r.resource_name_filter),
        pattern_type: r.pattern_type_filter,
        principal: opt(&r.principal_filter),
        host: opt(&r.host_filter),
        operation: r.operation,
        permission: r.permission_type,
    };
    if let Some(why) = filter.invalid() {
        let code = codes::refused(peer, "DescribeAcls", codes::INVALID_REQUEST, &why);
        return DescribeAclsResponse::default().with_error_code(code).with_error_message(Some(text(&why)));
    }
    // Grouped by resource pattern, as Kafka answers.
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    let mut acls = broker.acls.describe(&filter);
    acls.sort();
    for a in acls {
        let entry = AclDescription::default()
            .with_principal(text(&a.principal))
            .with_host(text(&a.host))
            .with_operation(a.operation)
            .with_permission_type(a.permission);
        match resources.last_mut() {
            Some(last)
                if last.resource_type == a.resource_type
                    && last.resource_name.as_str() == a.name
                    && last.pattern_type == a.pattern_type =>
            {
                last.acls.push(entry)
            }
            _ => resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(a.resource_type)
                    .with_resource_name(text(&a.name))
                    .with_pattern_type(a.pattern_type)
                    .with_acls(vec![entry]),
            ),
        }
    }
    DescribeAclsResponse::default().with_resources(resources)
}

pub fn delete_acls(broker: &Broker, r: DeleteAclsRequest, peer: &str) -> DeleteAclsResponse {
    let filters: Vec<AclFilter> = r
        .filters
        .iter()
        .map(|f| AclFilter {
            resource_type: f.resource_type_filter,
            name: opt(&f.resource_name_filter),
            pattern_type: f.pattern_type_filter,
            principal: opt(&f.principal_filter),
            host: opt(&f.host_filter),
            operation: f.operation,
            permission: f.permission_type,
        })
        .collect();
    let invalid: Vec<Option<String>> = filters.iter().map(AclFilter::invalid).collect();
    let valid: Vec<AclFilter> =
        filters.iter().zip(&invalid).filter(|(_, why)| why.is_none()).map(|(f, _)| f.clone()).collect();
    let mut removed = match broker.acls.delete(&valid) {
        Ok(removed) => removed.into_iter(),
        Err(e) => {
            let why = format!("cannot store the ACLs: {e}");
            let code = codes::refused(peer, "DeleteAcls", codes::UNKNOWN_SERVER_ERROR, &why);
            let result = DeleteAclsFilterResult::default().with_error_code(code).with_error_message(Some(text(&why)));
            return DeleteAclsResponse::default().with_filter_results(vec![result; filters.len()]);
        }
    };
    let results = invalid
        .into_iter()
        .map(|why| match why {
            Some(why) => DeleteAclsFilterResult::default()
                .with_error_code(codes::refused(peer, "DeleteAcls", codes::INVALID_REQUEST, &why))
                .with_error_message(Some(text(&why))),
            None => {
                let matching = removed
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(a.resource_type)
                            .with_resource_name(text(&a.name))
                            .with_pattern_type(a.pattern_type)
                            .with_principal(text(&a.principal))
                            .with_host(text(&a.host))
                            .with_operation(a.operation)
                            .with_permission_type(a.permission)
                    })
                    .collect();
                DeleteAclsFilterResult::default().with_matching_acls(matching)
            }
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
