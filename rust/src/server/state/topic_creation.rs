//! Topic creation for the network (CreateTopics, Metadata's auto-creation), bounded so that a
//! flood of new names cannot take the server from its other clients: each creation rewrites the
//! data directory's metadata file and makes folders (tens of milliseconds), so it runs off the
//! request workers, one request's batch at a time (the creation lane), within the request's
//! deadline. Kafka's controller mutation quota (KIP-599, `controller_mutation_rate`: partitions
//! created per second) is unlimited unless `kafkalite serve --controller-mutation-rate` sets one
//! (for all clients together): a token bucket, a topic created while it is not empty (the topic
//! that empties it is still created, as Kafka's strict quota does), later ones refused with
//! THROTTLING_QUOTA_EXCEEDED and the response's `throttle_time_ms` saying when it has room again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::broker::Broker;
use super::locks::lock;
use super::waits;
use crate::storage::error::{Error, Result};

/// How many seconds of the rate the bucket holds after a quiet spell: Kafka measures a quota
/// over `quota.window.num` (11) x `quota.window.size.seconds` (1), so its token bucket's burst
/// is 11 s of the rate.
const BURST_SECONDS: f64 = 11.0;

/// A set `controller_mutation_rate` and what remains of its burst.
struct Bucket {
    /// Partitions per second.
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn burst(&self) -> f64 {
        self.rate * BURST_SECONDS
    }
}

pub struct TopicCreation {
    /// None: no quota (Kafka's default). Consistent at any panic: fields set together by
    /// arithmetic that cannot panic.
    bucket: Option<Mutex<Bucket>>,
    /// One request's creations at a time (each holds the metadata file's lock anyway): a flood
    /// over many connections queues here, not on the blocking pool's slots.
    lane: tokio::sync::Mutex<()>,
}

/// What became of one topic to create.
#[derive(Debug)]
pub enum Created {
    Done,
    /// Existed already (created by someone else meanwhile).
    Existed,
    /// Over the quota: retry after `throttle_ms`.
    Throttled {
        throttle_ms: i32,
    },
    /// The creation failed.
    Failed(Error),
    /// Admitted, but it did not get its turn before the deadline (creations ahead of it, or an
    /// embedded `Admin` holding the metadata file's lock): not created, retry.
    Late,
}

/// `rate` as `--controller-mutation-rate` takes it: partitions per second, finite and positive.
pub fn check_rate(rate: f64) -> Result<f64> {
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(Error::config(format!(
            "the controller mutation rate must be a positive number of partitions per second, not {rate}"
        )))
    }
}

impl TopicCreation {
    /// Creation under `controller_mutation_rate` partitions/s (None: unlimited; a rate
    /// `check_rate` accepts).
    pub fn new(rate: Option<f64>) -> TopicCreation {
        let bucket = rate.map(|rate| Mutex::new(Bucket { rate, tokens: rate * BURST_SECONDS, at: Instant::now() }));
        TopicCreation { bucket, lane: tokio::sync::Mutex::new(()) }
    }

    /// The quota, for messages: "N partitions/s".
    pub fn quota(&self) -> String {
        match &self.bucket {
            Some(bucket) => format!("{} partitions/s", lock(bucket).rate),
            None => "unlimited".to_string(),
        }
    }

    /// Take `partitions` from the bucket if it is not empty (or, not `strict`, in any case:
    /// Kafka's permissive quota for old CreateTopics versions, which only throttles); else how
    /// long until it is not empty.
    fn admit(&self, partitions: i32, strict: bool) -> std::result::Result<(), i32> {
        let Some(bucket) = &self.bucket else { return Ok(()) };
        let mut bucket = lock(bucket);
        let now = Instant::now();
        let refill = now.duration_since(bucket.at).as_secs_f64() * bucket.rate;
        bucket.tokens = (bucket.tokens + refill).min(bucket.burst());
        bucket.at = now;
        if bucket.tokens > 0.0 || !strict {
            bucket.tokens -= f64::from(partitions.max(1));
            Ok(())
        } else {
            Err(millis((-bucket.tokens + 1.0) / bucket.rate))
        }
    }

    /// Kafka's `throttle_time_ms` for a response: how long until the bucket is not empty.
    fn throttle_ms(&self) -> i32 {
        let Some(bucket) = &self.bucket else { return 0 };
        let bucket = lock(bucket);
        let debt = -bucket.tokens - bucket.at.elapsed().as_secs_f64() * bucket.rate;
        if debt < 0.0 {
            0
        } else {
            millis((debt + 1.0) / bucket.rate)
        }
    }

    /// Create `topics` (name, partitions, configs; names already validated) in order, as far as
    /// the quota allows (`strict`: see `admit`), off the request workers; an outcome per topic
    /// (the throttled first) and the response's `throttle_time_ms`.
    pub async fn create(
        &self,
        broker: &Arc<Broker>,
        topics: Vec<(String, i32, BTreeMap<String, String>)>,
        strict: bool,
        deadline: Instant,
    ) -> (Vec<(String, Created)>, i32) {
        let mut outcomes = Vec::with_capacity(topics.len());
        let mut admitted = Vec::new();
        for (name, partitions, configs) in topics {
            match self.admit(partitions, strict) {
                Ok(()) => admitted.push((name, partitions, configs)),
                Err(throttle_ms) => outcomes.push((name, Created::Throttled { throttle_ms })),
            }
        }
        if admitted.is_empty() {
            return (outcomes, self.throttle_ms());
        }
        let names: Vec<String> = admitted.iter().map(|(name, _, _)| name.clone()).collect();
        let done = match waits::within(deadline, self.lane.lock()).await {
            Some(_lane) => waits::off_workers(broker, deadline, move |broker| create_all(broker, &admitted)).await.ok(),
            None => None,
        };
        let done = done.unwrap_or_else(|| names.into_iter().map(|name| (name, Created::Late)).collect());
        if done.iter().any(|(_, c)| matches!(c, Created::Done)) {
            broker.topics_changed();
        }
        outcomes.extend(done);
        (outcomes, self.throttle_ms())
    }
}

/// `seconds` as `throttle_time_ms`, at most i32::MAX: a rate so small that the wait overflows
/// (up to infinity) gets the longest throttle the field holds. A float's `as` saturates (NaN is
/// 0), where `Duration::from_secs_f64` would panic past u64::MAX seconds.
fn millis(seconds: f64) -> i32 {
    (seconds * 1000.0).clamp(0.0, f64::from(i32::MAX)) as i32
}

fn create_all(broker: &Broker, topics: &[(String, i32, BTreeMap<String, String>)]) -> Vec<(String, Created)> {
    topics
        .iter()
        .map(|(name, partitions, configs)| {
            let created: Result<bool> = broker.dir.create_topic(name, *partitions, configs);
            let outcome = match created {
                Ok(true) => Created::Done,
                Ok(false) => Created::Existed,
                Err(e) => Created::Failed(e),
            };
            (name.clone(), outcome)
        })
        .collect()
}
