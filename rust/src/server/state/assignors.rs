//! The server-side assignors of the consumer group protocol (KIP-848), by Kafka's names:
//! `uniform` (the default: partitions spread evenly over the members subscribed to them,
//! members keeping what they have where balance allows, like Kafka's UniformAssignor) and
//! `range` (per topic, consecutive ranges of partitions to the subscribed members in member id
//! order, the first ones getting one more, like Kafka's RangeAssignor, so co-partitioned topics
//! are assigned alike). A member chooses with `group.remote.assignor` (the heartbeat's
//! ServerAssignor); the group uses the one most of its members ask for.

use std::collections::{BTreeMap, BTreeSet};

/// Partitions by topic name.
pub type Assignment = BTreeMap<String, BTreeSet<i32>>;

pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";
/// Kafka's `group.consumer.assignors` default order: the first is used when no member asks.
pub const ASSIGNORS: &[&str] = &[UNIFORM, RANGE];

/// What an assignor knows of a member: its subscription and what it is assigned now.
pub struct MemberSpec<'a> {
    pub subscribed: &'a BTreeSet<String>,
    pub current: &'a Assignment,
}

/// The target assignment of `members` by `assignor` (one of `ASSIGNORS`) over `topics`
/// (subscribed topics that exist, with their partition counts).
pub fn assign(
    assignor: &str,
    members: &BTreeMap<String, MemberSpec>,
    topics: &BTreeMap<String, i32>,
) -> BTreeMap<String, Assignment> {
    if assignor == RANGE {
        range(members, topics)
    } else {
        uniform(members, topics)
    }
}

fn range(members: &BTreeMap<String, MemberSpec>, topics: &BTreeMap<String, i32>) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members.keys().map(|m| (m.clone(), Assignment::new())).collect();
    for (topic, &count) in topics {
        let subscribers: Vec<&String> =
            members.iter().filter(|(_, s)| s.subscribed.contains(topic)).map(|(m, _)| m).collect();
        if subscribers.is_empty() {
            continue;
        }
        let (each, extra) = (count as usize / subscribers.len(), count as usize % subscribers.len());
        let mut next = 0i32;
        for (i, member) in subscribers.into_iter().enumerate() {
            let n = (each + usize::from(i < extra)) as i32;
            if n > 0 {
                out.get_mut(member).unwrap().entry(topic.clone()).or_default().extend(next..next + n);
            }
            next += n;
        }
    }
    out
}

fn uniform(members: &BTreeMap<String, MemberSpec>, topics: &BTreeMap<String, i32>) -> BTreeMap<String, Assignment> {
    let eligible = |topic: &str| -> Vec<&String> {
        members.iter().filter(|(_, s)| s.subscribed.contains(topic)).map(|(m, _)| m).collect()
    };
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    let mut load: BTreeMap<&String, usize> = members.keys().map(|m| (m, 0)).collect();
    // Stickiness: each member keeps what it has that it still subscribes to and that exists.
    for (member, spec) in members {
        for (topic, partitions) in spec.current {
            let Some(&count) = topics.get(topic) else { continue };
            if !spec.subscribed.contains(topic) {
                continue;
            }
            for &p in partitions.iter().filter(|&&p| p < count) {
                if let std::collections::btree_map::Entry::Vacant(e) = owner.entry((topic.clone(), p)) {
                    e.insert(member.clone());
                    *load.get_mut(member).unwrap() += 1;
                }
            }
        }
    }
    // The rest, the partitions with the fewest eligible members first, each to the least loaded.
    let mut free: Vec<(usize, String, i32)> = topics
        .iter()
        .flat_map(|(t, &n)| (0..n).map(move |p| (t.clone(), p)))
        .filter(|key| !owner.contains_key(key))
        .map(|(t, p)| (eligible(&t).len(), t, p))
        .filter(|(n, _, _)| *n > 0)
        .collect();
    free.sort();
    for (_, topic, p) in free {
        let to = eligible(&topic).into_iter().min_by_key(|m| (load[m], *m)).unwrap();
        *load.get_mut(to).unwrap() += 1;
        owner.insert((topic, p), to.clone());
    }
    // Balance: move partitions from a member to an eligible one with at least two fewer, until
    // no such move is left (each move lowers the sum of squared loads, so this ends).
    loop {
        let mut moved = false;
        for (key, from) in owner.clone() {
            let to = eligible(&key.0).into_iter().min_by_key(|m| (load[m], *m)).unwrap();
            if load[&from] > load[to] + 1 {
                *load.get_mut(&from).unwrap() -= 1;
                *load.get_mut(to).unwrap() += 1;
                owner.insert(key, to.clone());
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Assignment> = members.keys().map(|m| (m.clone(), Assignment::new())).collect();
    for ((topic, p), member) in owner {
        out.get_mut(&member).unwrap().entry(topic).or_default().insert(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(topics: &[&str]) -> BTreeSet<String> {
        topics.iter().map(|t| t.to_string()).collect()
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(|p| p.len()).sum()
    }

    #[test]
    fn uniform_is_balanced_sticky_and_covers_every_partition_once() {
        let sub = set(&["a", "b"]);
        let none = Assignment::new();
        let topics: BTreeMap<String, i32> = [("a".to_string(), 5), ("b".to_string(), 2)].into();
        let two: BTreeMap<String, MemberSpec> =
            ["m1", "m2"].iter().map(|m| (m.to_string(), MemberSpec { subscribed: &sub, current: &none })).collect();
        let first = assign(UNIFORM, &two, &topics);
        assert_eq!(first.values().map(count).sum::<usize>(), 7);
        assert!(first.values().all(|a| (3..=4).contains(&count(a))));
        // A third member: the first two keep most of theirs, each gives up at most what balance needs.
        let mut three: BTreeMap<String, MemberSpec> =
            first.iter().map(|(m, a)| (m.clone(), MemberSpec { subscribed: &sub, current: a })).collect();
        three.insert("m3".into(), MemberSpec { subscribed: &sub, current: &none });
        let second = assign(UNIFORM, &three, &topics);
        assert!(second.values().all(|a| (2..=3).contains(&count(a))));
        for m in ["m1", "m2"] {
            let kept: usize = second[m].iter().map(|(t, ps)| ps.intersection(&first[m][t]).count()).sum();
            assert_eq!(kept, count(&second[m]), "{m} only lost partitions");
        }
    }

    #[test]
    fn range_gives_consecutive_ranges_in_member_order() {
        let sub = set(&["t"]);
        let none = Assignment::new();
        let members: BTreeMap<String, MemberSpec> =
            ["b", "a"].iter().map(|m| (m.to_string(), MemberSpec { subscribed: &sub, current: &none })).collect();
        let out = assign(RANGE, &members, &[("t".to_string(), 5)].into());
        assert_eq!(out["a"]["t"], [0, 1, 2].into());
        assert_eq!(out["b"]["t"], [3, 4].into());
    }
}
