//! The group's claim for network members (`group_owner`): taken by the first join of a group
//! this server does not hold yet, one claim at a time, waiting with backoff (off the request
//! workers' locks) while an embedded member holds the group's state lock.

use std::sync::Mutex;
use std::time::Instant;

use super::{Coordinator, TARGET};
use crate::server::codes;
use crate::server::state::group_owner::{self, Claim, NetworkOwner};
use crate::server::state::waits;

impl Coordinator {
    pub(super) fn claimed(&self, group: &str) -> bool {
        self.groups().get(group).is_some_and(|g| g.owner.is_some())
    }

    /// One try at `group_owner::claim` (non-blocking), one claim of this server at a time;
    /// `None` when the group is claimed already.
    async fn try_claim(
        &self,
        group: &str,
    ) -> Option<Result<Result<Claim, crate::storage::error::Error>, tokio::task::JoinError>> {
        let _one_at_a_time = self.claiming.lock().await;
        if self.claimed(group) {
            return None;
        }
        let (dir, id, who) = (self.data_dir.clone(), group.to_string(), self.identity.clone());
        // The folder's file operations, off the request workers.
        Some(tokio::task::spawn_blocking(move || group_owner::claim(&dir, &id, &who)).await)
    }

    /// Make sure this server holds `group`'s claim (`group_owner`); the error code otherwise.
    /// The claim is returned for the caller to install with its first member, in the same
    /// critical section (an unused claim is released by `expire`). An embedded member holding
    /// the group's state lock is waited for with backoff until `waits::LOCK_WAIT`, then the
    /// join is answered COORDINATOR_LOAD_IN_PROGRESS (Kafka's "the coordinator is loading the
    /// group": the client retries the join) and a WARNING names the holder.
    pub(super) async fn claim(&self, group: &str) -> Result<Option<NetworkOwner>, i16> {
        if self.claimed(group) {
            return Ok(None);
        }
        let started = Instant::now();
        let holder = Mutex::new(String::new());
        let outcome = waits::retry_until(waits::deadline(0), || async {
            match self.try_claim(group).await {
                Some(Ok(Ok(Claim::Busy(who)))) => {
                    *holder.lock().unwrap_or_else(|e| e.into_inner()) = who;
                    None
                }
                other => Some(other),
            }
        })
        .await;
        let Some(claim) = outcome else {
            let holder = holder.into_inner().unwrap_or_else(|e| e.into_inner());
            log::warn!(
                target: TARGET,
                "a join of group {group:?}: gave up after {} ms waiting for the group's state lock, held by {holder} \
                 (an embedded member, stopped or hung?); answered COORDINATOR_LOAD_IN_PROGRESS",
                started.elapsed().as_millis()
            );
            return Err(codes::COORDINATOR_LOAD_IN_PROGRESS);
        };
        let Some(claim) = claim else { return Ok(None) };
        match claim {
            Ok(Ok(Claim::Busy(_))) => Err(codes::COORDINATOR_LOAD_IN_PROGRESS), // never: retried above
            Ok(Ok(Claim::Owned(owner))) => Ok(Some(owner)),
            // Kafka's answer to a member whose protocol differs from the group's (a connect
            // group joined by a consumer, a classic member joining a new-protocol group):
            // fatal for the client, which is what a group in use elsewhere needs.
            Ok(Ok(Claim::Embedded)) => {
                log::warn!(
                    target: TARGET,
                    "refused a network member of group {group:?}: the group has live embedded kafkalite.Consumer \
                     members in this data directory, or static ones within their session \
                     (INCONSISTENT_GROUP_PROTOCOL); use another group id"
                );
                Err(codes::INCONSISTENT_GROUP_PROTOCOL)
            }
            Ok(Ok(Claim::OtherServer(holder))) => {
                log::warn!(
                    target: TARGET,
                    "refused a network member of group {group:?}: the group is coordinated by another server \
                     on this data directory ({holder}) (INCONSISTENT_GROUP_PROTOCOL)"
                );
                Err(codes::INCONSISTENT_GROUP_PROTOCOL)
            }
            Ok(Err(e)) => {
                log::warn!(target: TARGET, "cannot claim group {group:?} for network members: {e}");
                Err(codes::COORDINATOR_NOT_AVAILABLE)
            }
            Err(e) => {
                log::warn!(target: TARGET, "claiming group {group:?} failed: {e}");
                Err(codes::COORDINATOR_NOT_AVAILABLE)
            }
        }
    }
}
