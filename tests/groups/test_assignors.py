"""Assignment strategies: Kafka's documented assignments for range, roundrobin and sticky, and
hypothesis properties of sticky / cooperative-sticky (complete, balanced, minimal movement,
two-phase hand-over)."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from kafkalite.groups.assignors import (
    cooperative_sticky_assign,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)


def tps(*names: str):
    """'t0p1' -> TopicPartition('t0', 1)."""
    from kafkalite.groups.assignors import TopicPartition

    out = []
    for n in names:
        topic, p = n.rsplit("p", 1)
        out.append(TopicPartition(topic, int(p)))
    return out


def as_sets(assignment):
    return {m: set(v) for m, v in assignment.items()}


# -- Kafka's javadoc examples (RangeAssignor, RoundRobinAssignor, StickyAssignor) -----------


def test_range_javadoc_example():
    a = range_assign({"t0": 3, "t1": 3}, {"C0": ["t0", "t1"], "C1": ["t0", "t1"]})
    assert a == {"C0": tps("t0p0", "t0p1", "t1p0", "t1p1"), "C1": tps("t0p2", "t1p2")}


def test_roundrobin_javadoc_examples():
    a = roundrobin_assign({"t0": 3, "t1": 3}, {"C0": ["t0", "t1"], "C1": ["t0", "t1"]})
    assert a == {"C0": tps("t0p0", "t0p2", "t1p1"), "C1": tps("t0p1", "t1p0", "t1p2")}
    subs = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    a = roundrobin_assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    assert a == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1", "t2p0", "t2p1", "t2p2")}


def test_sticky_javadoc_example_1():
    topics = ["t0", "t1", "t2", "t3"]
    parts = {t: 2 for t in topics}
    first = sticky_assign(parts, {c: topics for c in ("C0", "C1", "C2")})
    assert as_sets(first) == as_sets(
        {"C0": tps("t0p0", "t1p1", "t3p0"), "C1": tps("t0p1", "t2p0", "t3p1"), "C2": tps("t1p0", "t2p1")}
    )
    del first["C1"]
    second = sticky_assign(parts, {c: topics for c in ("C0", "C2")}, first)
    assert as_sets(second) == as_sets(
        {"C0": tps("t0p0", "t1p1", "t3p0", "t2p0"), "C2": tps("t1p0", "t2p1", "t0p1", "t3p1")}
    )


def test_sticky_javadoc_example_2():
    parts = {"t0": 1, "t1": 2, "t2": 3}
    subs = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    first = sticky_assign(parts, subs)
    assert as_sets(first) == as_sets(
        {"C0": tps("t0p0"), "C1": tps("t1p0", "t1p1"), "C2": tps("t2p0", "t2p1", "t2p2")}
    )
    del subs["C0"]
    second = sticky_assign(parts, subs, first)
    assert as_sets(second) == as_sets({"C1": tps("t1p0", "t1p1", "t0p0"), "C2": tps("t2p0", "t2p1", "t2p2")})


# -- RangeAssignorTest-style edge cases ------------------------------------------------------


def test_range_edge_cases():
    assert range_assign({}, {"c": []}) == {"c": []}
    assert range_assign({}, {"c": ["missing"]}) == {"c": []}
    assert range_assign({"t": 3, "other": 3}, {"c": ["t"]}) == {"c": tps("tp0", "tp1", "tp2")}
    assert range_assign({"t": 1}, {"c0": ["t"], "c1": ["t"]}) == {"c0": tps("tp0"), "c1": []}
    subs = {"consumer1": ["topic1"], "consumer2": ["topic1", "topic2"], "consumer3": ["topic1"]}
    a = range_assign({"topic1": 3, "topic2": 2}, subs)
    assert a == {
        "consumer1": tps("topic1p0"),
        "consumer2": tps("topic1p1", "topic2p0", "topic2p1"),
        "consumer3": tps("topic1p2"),
    }


# -- sticky / cooperative-sticky properties --------------------------------------------------

members_st = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=6, unique=True)
topics_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 12), min_size=1)


def check_complete(assignment, parts, subs):
    owners = [tp for m in assignment for tp in assignment[m]]
    wanted = {
        tp
        for t, n in parts.items()
        if any(t in s for s in subs.values())
        for tp in tps(*(f"{t}p{p}" for p in range(n)))
    }
    assert sorted(owners) == sorted(wanted), "every subscribed partition exactly once"
    for m, owned in assignment.items():
        assert all(tp.topic in subs[m] for tp in owned), f"{m} got a topic it does not subscribe to"


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(members=members_st, parts=topics_st, data=st.data())
def test_sticky_is_complete_balanced_and_sticky(members, parts, data):
    topics = sorted(parts)
    subs = {m: topics for m in members}
    first = sticky_assign(parts, subs)
    check_complete(first, parts, subs)
    sizes = [len(v) for v in first.values()]
    assert max(sizes) - min(sizes) <= 1
    # A member leaves: everything the survivors held stays with them.
    if len(members) > 1:
        gone = data.draw(st.sampled_from(members))
        survivors = {m: topics for m in members if m != gone}
        previous = {m: v for m, v in first.items() if m != gone}
        second = sticky_assign(parts, survivors, previous)
        check_complete(second, parts, survivors)
        for m in survivors:
            assert set(previous[m]) <= set(second[m]), f"{m} lost a partition it did not have to"
    # A member joins: only partitions that end up with the newcomer move.
    newcomer = "zz"
    joined = {**subs, newcomer: topics}
    third = sticky_assign(parts, joined, first)
    check_complete(third, parts, joined)
    sizes = [len(v) for v in third.values()]
    assert max(sizes) - min(sizes) <= 1
    for m in members:
        assert set(third[m]) <= set(first[m]), "existing members only give partitions away"


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(members=members_st, parts=topics_st, data=st.data())
def test_sticky_with_mixed_subscriptions_is_complete(members, parts, data):
    topics = sorted(parts)
    subs = {m: data.draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)) for m in members}
    a = sticky_assign(parts, subs)
    check_complete(a, parts, subs)
    # Nobody can take a partition from someone holding 2+ more of a topic it also subscribes to.
    for m in members:
        for n in members:
            if len(a[n]) - len(a[m]) > 1:
                assert not any(tp.topic in subs[m] for tp in a[n]), f"{m} could take from {n}"


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(members=members_st, parts=topics_st)
def test_cooperative_sticky_hands_over_in_two_rebalances(members, parts):
    topics = sorted(parts)
    before = sticky_assign(parts, {m: topics for m in members})
    joined = {**{m: topics for m in members}, "new1": topics, "new2": topics}
    now, revoking = cooperative_sticky_assign(parts, joined, before)
    # First rebalance: members keep what they keep, give up what moves, gain nothing owned by others.
    for m in members:
        assert set(now[m]) <= set(before[m])
        assert set(before[m]) - set(now[m]) <= revoking
    assert all(not (set(now[m]) & revoking) for m in now)
    # Second rebalance, from what each member then owns: nothing more to revoke, target reached.
    final, again = cooperative_sticky_assign(parts, joined, now)
    assert again == set()
    check_complete(final, parts, joined)
    sizes = [len(v) for v in final.values()]
    assert max(sizes) - min(sizes) <= 1
    moved = sum(1 for m in members for tp in before[m] if tp not in final[m])
    assert moved == len(revoking), "exactly the revoked partitions changed owner"
