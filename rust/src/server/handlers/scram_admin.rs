//! AlterUserScramCredentials and DescribeUserScramCredentials (`kafka-configs --entity-type
//! users`, Admin's alterUserScramCredentials/describeUserScramCredentials) over the data
//! directory's users file (`crate::coordination::users`, the file `kafkalite users` edits). The checks and
//! error codes are Kafka's `ScramControlManager`'s: a user named twice in one request is
//! DUPLICATE_RESOURCE (none of its changes apply), an unknown mechanism
//! UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..=16384 UNACCEPTABLE_CREDENTIAL, the
//! delete of a credential that does not exist RESOURCE_NOT_FOUND. The client sends the salt and
//! the salted password, never the password. A new credential counts from the next
//! authentication on: `sasl` reads the users file at every exchange. Who may call them (ALTER or
//! DESCRIBE on the cluster) is checked in `acl_requests`.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::coordination::users::{self, Alteration, Credential, Mechanism};
use crate::server::codes;
use crate::server::state::broker::Broker;

/// Kafka's `ScramMechanism` wire codes (0 is UNKNOWN).
fn mechanism(code: i8) -> Option<Mechanism> {
    match code {
        1 => Some(Mechanism::ScramSha256),
        2 => Some(Mechanism::ScramSha512),
        _ => None,
    }
}

fn code_of(m: Mechanism) -> i8 {
    match m {
        Mechanism::ScramSha256 => 1,
        Mechanism::ScramSha512 => 2,
    }
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// One user's refusal (Kafka's code and message); None while it is fine.
type Outcome = Option<(i16, String)>;

/// The mechanism of one upsertion, or why Kafka refuses it (its code and message).
fn check_upsertion(code: i8, iterations: i32) -> Result<Mechanism, (i16, String)> {
    let m = mechanism(code).ok_or((codes::UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism".to_string()))?;
    if iterations < users::MIN_ITERATIONS as i32 {
        return Err((codes::UNACCEPTABLE_CREDENTIAL, "Too few iterations".into()));
    }
    if iterations > users::MAX_ITERATIONS as i32 {
        return Err((codes::UNACCEPTABLE_CREDENTIAL, "Too many iterations".into()));
    }
    Ok(m)
}

pub fn alter_user_scram_credentials(
    broker: &Broker,
    r: AlterUserScramCredentialsRequest,
    peer: &str,
) -> AlterUserScramCredentialsResponse {
    // Users in the order the request names them, each with its outcome and its one change.
    let mut order: Vec<String> = Vec::new();
    let mut outcome: BTreeMap<String, (Outcome, Option<Alteration>)> = BTreeMap::new();
    let mut note = |user: &str, result: Result<Alteration, (i16, String)>| {
        if let Some((previous, change)) = outcome.get_mut(user) {
            if previous.is_none() {
                let why = "A user credential cannot be altered twice in the same request";
                *previous = Some((codes::DUPLICATE_RESOURCE, why.into()));
            }
            *change = None;
            return;
        }
        order.push(user.to_string());
        let entry = match result {
            Ok(change) => (None, Some(change)),
            Err(refused) => (Some(refused), None),
        };
        outcome.insert(user.to_string(), entry);
    };
    for d in &r.deletions {
        let user = d.name.to_string();
        let change = match mechanism(d.mechanism) {
            Some(m) => Ok(Alteration::Delete { user: user.clone(), mechanism: m }),
            None => Err((codes::UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism".into())),
        };
        note(&user, change);
    }
    for u in &r.upsertions {
        let user = u.name.to_string();
        let change = check_upsertion(u.mechanism, u.iterations).and_then(|m| {
            // The iterations are in range here: the cast cannot wrap.
            Credential::from_salted(m, &u.salt, &u.salted_password, u.iterations as u32)
                .map(|credential| Alteration::Upsert { user: user.clone(), mechanism: m, credential })
                .map_err(|e| (codes::UNACCEPTABLE_CREDENTIAL, e.to_string()))
        });
        note(&user, change);
    }
    for user in &order {
        let (refused, _) = outcome.get_mut(user).expect("every ordered user has an outcome");
        if refused.is_none() {
            if let Err(e) = users::validate_user_name(user) {
                *refused = Some((codes::UNACCEPTABLE_CREDENTIAL, e.to_string()));
            }
        }
    }
    let changes: Vec<(&String, Alteration)> = order
        .iter()
        .filter_map(|user| match &outcome[user] {
            (None, Some(change)) => Some((user, change.clone())),
            _ => None,
        })
        .collect();
    let alterations: Vec<Alteration> = changes.iter().map(|(_, c)| c.clone()).collect();
    let stored = if alterations.is_empty() { Ok(Vec::new()) } else { users::alter(broker.dir.path(), &alterations) };
    match stored {
        Ok(applied) => {
            for ((user, _), applied) in changes.iter().zip(applied) {
                if !applied {
                    let why = "Attempt to delete a user credential that does not exist";
                    outcome.get_mut(*user).expect("known user").0 = Some((codes::RESOURCE_NOT_FOUND, why.into()));
                }
            }
        }
        Err(e) => {
            for (user, _) in &changes {
                let why = format!("cannot store the users file: {e}");
                outcome.get_mut(*user).expect("known user").0 = Some((codes::UNKNOWN_SERVER_ERROR, why));
            }
        }
    }
    let results = order
        .iter()
        .map(|user| {
            let result = AlterUserScramCredentialsResult::default().with_user(text(user));
            match &outcome[user].0 {
                None => result,
                Some((code, why)) => {
                    let reason = format!("user {user:?}: {why}");
                    result
                        .with_error_code(codes::refused(peer, "AlterUserScramCredentials", *code, &reason))
                        .with_error_message(Some(text(why)))
                }
            }
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

pub fn describe_user_scram_credentials(
    broker: &Broker,
    r: DescribeUserScramCredentialsRequest,
    peer: &str,
) -> DescribeUserScramCredentialsResponse {
    let known = match users::list(broker.dir.path()) {
        Ok(known) => known,
        Err(e) => {
            let why = format!("cannot read the users file: {e}");
            let code = codes::refused(peer, "DescribeUserScramCredentials", codes::UNKNOWN_SERVER_ERROR, &why);
            return DescribeUserScramCredentialsResponse::default()
                .with_error_code(code)
                .with_error_message(Some(text(&why)));
        }
    };
    let infos = |creds: &[(Mechanism, u32)]| -> Vec<CredentialInfo> {
        creds
            .iter()
            .map(|&(m, iterations)| {
                CredentialInfo::default().with_mechanism(code_of(m)).with_iterations(iterations as i32)
            })
            .collect()
    };
    let described = |user: &str, creds: &[(Mechanism, u32)]| {
        DescribeUserScramCredentialsResult::default().with_user(text(user)).with_credential_infos(infos(creds))
    };
    let results = match r.users.filter(|u| !u.is_empty()) {
        // No user named: every user with a credential.
        None => known.iter().map(|(user, creds)| described(user, creds)).collect(),
        Some(asked) => {
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for u in &asked {
                *seen.entry(u.name.to_string()).or_default() += 1;
            }
            let mut answered = std::collections::BTreeSet::new();
            asked
                .iter()
                .map(|u| u.name.to_string())
                .filter(|user| answered.insert(user.clone()))
                .map(|user| {
                    let (code, why) = if seen[&user] > 1 {
                        let why = "Cannot describe SCRAM credentials for the same user twice in a single request";
                        (codes::DUPLICATE_RESOURCE, why.to_string())
                    } else if let Some(creds) = known.get(&user) {
                        return described(&user, creds);
                    } else {
                        let why = format!("Attempt to describe a user credential that does not exist: {user}");
                        (codes::RESOURCE_NOT_FOUND, why)
                    };
                    let reason = format!("user {user:?}: {why}");
                    DescribeUserScramCredentialsResult::default()
                        .with_user(text(&user))
                        .with_error_code(codes::refused(peer, "DescribeUserScramCredentials", code, &reason))
                        .with_error_message(Some(text(&why)))
                })
                .collect()
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// AlterUserScramCredentials answered `code` for every user it names (a refused request).
pub fn alter_refused(r: &AlterUserScramCredentialsRequest, code: i16) -> AlterUserScramCredentialsResponse {
    let names = r.deletions.iter().map(|d| &d.name).chain(r.upsertions.iter().map(|u| &u.name));
    let mut seen = std::collections::BTreeSet::new();
    let results = names
        .filter(|n| seen.insert(n.to_string()))
        .map(|n| {
            AlterUserScramCredentialsResult::default()
                .with_user(n.clone())
                .with_error_code(code)
                .with_error_message(Some(text(codes::name(code))))
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// DescribeUserScramCredentials answered `code` (a refused request: Kafka's top-level error).
pub fn describe_refused(code: i16) -> DescribeUserScramCredentialsResponse {
    DescribeUserScramCredentialsResponse::default()
        .with_error_code(code)
        .with_error_message(Some(text(codes::name(code))))
}
