"""A consumer group's rebalance: the protocol the members share and the assignment it computes.

Rebalancing is done by whoever notices the change (a join, a leave, a death, new partitions),
under the group's state lock (``kafkalite.groups.files``): ``rebalance`` recomputes the
assignment with the group's strategy (``kafkalite.groups.assignors``) and bumps the generation.
Moving ownership to match it is the members' hand-over (``kafkalite.groups.member``).
"""

from __future__ import annotations

from typing import Any

from kafkalite.errors import InvalidConfigError
from kafkalite.groups.assignors import ASSIGNORS, sticky_assign
from kafkalite.groups.files import logger, partition_key, partition_of_key

EAGER = ("range", "roundrobin")


def static_member(state: dict[str, Any], instance_id: str) -> str | None:
    """The member id ``instance_id`` maps to in the group (Kafka's staticMemberId), or None."""
    return next((m for m, info in state["members"].items() if info.get("instance_id") == instance_id), None)


def choose_protocol(members: dict[str, dict[str, Any]]) -> str:
    """The first strategy of the longest-standing member that every member supports."""
    ordered = sorted(members.values(), key=lambda m: m["joined"])
    for strategy in ordered[0]["strategies"]:
        if all(strategy in m["strategies"] for m in ordered):
            return strategy
    raise InvalidConfigError(
        "the members of this group share no partition_assignment_strategy: "
        + "; ".join(f"{m['client_id']} supports {m['strategies']}" for m in ordered)
    )


def rebalance(state: dict[str, Any], partition_counts: dict[str, int], why: str) -> None:
    """Recompute the assignment for the current members and start a new generation. Owners
    that left the group lose their claim. ``why`` (a member joined, left...) is logged with the
    new assignment at INFO, as a broker's group coordinator logs each rebalance."""
    members = state["members"]
    state["generation"] += 1
    state["owners"] = {k: m for k, m in state["owners"].items() if m in members}
    if not members:
        state.update(protocol=None, assignment={}, partitions={})
        logger.info(
            "group %r rebalanced (%s): generation %d, no members",
            state.get("group_id"),
            why,
            state["generation"],
        )
        return
    protocol = choose_protocol(members)
    subscriptions = {m: sorted(info["topics"]) for m, info in members.items()}
    wanted = set().union(*map(set, subscriptions.values()))
    counts = {t: n for t, n in partition_counts.items() if t in wanted}
    if protocol in EAGER:
        assignment = ASSIGNORS[protocol](counts, subscriptions)
    else:
        # sticky and cooperative-sticky share the target; the hand-over makes it cooperative.
        owned = {m: [partition_of_key(k) for k in state["assignment"].get(m, [])] for m in members}
        assignment = sticky_assign(counts, subscriptions, owned)
    state["protocol"] = protocol
    state["assignment"] = {m: [partition_key(tp) for tp in tps] for m, tps in assignment.items()}
    state["partitions"] = counts
    logger.info(
        "group %r rebalanced (%s): generation %d, %d member(s), protocol %s, assignment %s",
        state.get("group_id"),
        why,
        state["generation"],
        len(members),
        protocol,
        {m: [f"{tp.topic}-{tp.partition}" for tp in tps] for m, tps in assignment.items()},
    )
