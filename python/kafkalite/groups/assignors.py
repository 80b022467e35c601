"""Partition assignment strategies with Kafka's names and rules: ``range``, ``roundrobin`` and
``cooperative-sticky``. Pure functions of the group's members (sorted by member id, as Kafka
sorts them), their subscriptions, the topics' partition counts and, for the sticky strategy,
what each member owned in the previous generation. Group membership (who is alive, generations,
rebalances) builds on these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


Assignment = dict[str, list[TopicPartition]]


def _all_partitions(partitions_per_topic: Mapping[str, int], topics: set[str]) -> list[TopicPartition]:
    """Subscribed partitions sorted by topic, then partition (Kafka's order)."""
    return [
        TopicPartition(t, p)
        for t in sorted(topics)
        if t in partitions_per_topic
        for p in range(partitions_per_topic[t])
    ]


def range_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Sequence[str]]
) -> Assignment:
    """Kafka's RangeAssignor: per topic, partitions in order over its subscribers in member-id
    order; the first ``partitions % subscribers`` members get one extra."""
    assignment: Assignment = {member: [] for member in subscriptions}
    topics = sorted({t for topics in subscriptions.values() for t in topics})
    for topic in topics:
        count = partitions_per_topic.get(topic)
        if count is None:
            continue
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        per_member, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = per_member * i + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            assignment[member] += [TopicPartition(topic, p) for p in range(start, start + length)]
    return assignment


def roundrobin_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Sequence[str]]
) -> Assignment:
    """Kafka's RoundRobinAssignor: all subscribed partitions in (topic, partition) order, dealt
    to the members in member-id order, skipping members not subscribed to the partition's topic."""
    assignment: Assignment = {member: [] for member in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return assignment
    subscribed = {m: set(ts) for m, ts in subscriptions.items()}
    topics = set().union(*subscribed.values())
    position = 0
    for tp in _all_partitions(partitions_per_topic, topics):
        while tp.topic not in subscribed[members[position % len(members)]]:
            position += 1
        assignment[members[position % len(members)]].append(tp)
        position += 1
    return assignment


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Sequence[str]],
    owned: Mapping[str, Sequence[TopicPartition]] | None = None,
) -> Assignment:
    """Kafka's sticky strategy: as balanced as the subscriptions allow (member counts differ by
    at most one among members that could take each other's partitions), and otherwise keeping
    every partition where it was. Deterministic: ties go by member id and partition order."""
    owned = owned or {}
    subscribed = {m: set(ts) for m, ts in subscriptions.items()}
    members = sorted(subscriptions)
    assignment: Assignment = {m: [] for m in members}
    all_topics = set().union(*subscribed.values()) if subscribed else set()
    partitions = _all_partitions(partitions_per_topic, all_topics)
    valid = set(partitions)
    holder: dict[TopicPartition, str] = {}
    # 1. Keep previous ownership that is still valid (a partition claimed twice goes to the
    #    first member in id order, as after a fenced generation).
    for m in members:
        for tp in owned.get(m, ()):
            tp = TopicPartition(*tp)
            if tp in valid and tp.topic in subscribed[m] and tp not in holder:
                holder[tp] = m
                assignment[m].append(tp)
    # 2. Trim members above their fair share; their extra partitions go back to the pool.
    quota = _quotas(members, subscribed, partitions)
    for m in members:
        while len(assignment[m]) > quota[m]:
            tp = assignment[m].pop()
            del holder[tp]
    # 3. Deal unassigned partitions to the least-loaded subscribed member.
    for tp in partitions:
        if tp not in holder:
            candidates = [m for m in members if tp.topic in subscribed[m]]
            if candidates:
                target = min(
                    candidates, key=lambda m: (len(assignment[m]) >= quota[m], len(assignment[m]), m)
                )
                assignment[target].append(tp)
                holder[tp] = target
    # 4. Move single partitions from the most to the least loaded member that can take them,
    #    while that narrows the gap by more than one (only when subscriptions differ).
    moved = True
    while moved:
        moved = False
        for src in sorted(members, key=lambda m: -len(assignment[m])):
            for tp in reversed(assignment[src]):
                dst = min(
                    (m for m in members if tp.topic in subscribed[m]), key=lambda m: (len(assignment[m]), m)
                )
                if len(assignment[src]) - len(assignment[dst]) > 1:
                    assignment[src].remove(tp)
                    assignment[dst].append(tp)
                    moved = True
                    break
            if moved:
                break
    return {m: sorted(assignment[m]) for m in members}


def _quotas(
    members: list[str], subscribed: dict[str, set[str]], partitions: list[TopicPartition]
) -> dict[str, int]:
    """The most each member should hold: an even share of the partitions it can take (exact
    ceil(P/C) when everyone subscribes to the same topics)."""
    quotas = {}
    for m in members:
        mine = [tp for tp in partitions if tp.topic in subscribed[m]]
        sharing = [n for n in members if subscribed[n] & subscribed[m]] or [m]
        quotas[m] = -(-len(mine) // len(sharing)) if mine else 0
    return quotas


def cooperative_sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Sequence[str]],
    owned: Mapping[str, Sequence[TopicPartition]] | None = None,
) -> tuple[Assignment, set[TopicPartition]]:
    """Kafka's CooperativeStickyAssignor: the sticky target, except that a partition moving from
    one live member to another is only revoked in this rebalance and assigned in the next one
    (so its old owner can commit first, and nobody stops consuming anything else).
    Returns (assignment for this rebalance, partitions being revoked)."""
    owned = {m: [TopicPartition(*tp) for tp in tps] for m, tps in (owned or {}).items()}
    target = sticky_assign(partitions_per_topic, subscriptions, owned)
    previous_owner = {tp: m for m, tps in owned.items() if m in subscriptions for tp in tps}
    revoking = {tp for m, tps in target.items() for tp in tps if previous_owner.get(tp, m) != m}
    now = {m: [tp for tp in tps if tp not in revoking] for m, tps in target.items()}
    return now, revoking


ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign, "sticky": sticky_assign}
