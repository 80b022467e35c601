"""KIP-447 generation fencing of ``send_offsets_to_transaction(offsets, consumer.group_metadata())``:
the group checks the generation, member id and group instance id of the metadata as Kafka's
TxnOffsetCommit does, so a zombie consumer (one that lost its partitions in a rebalance) cannot
commit its input offsets in a transaction; the transaction can then only be aborted."""

from __future__ import annotations

import time

import pytest
from helpers import read_process_write_data
from kafkalite import Consumer, Producer, TopicPartition
from kafkalite.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    UnknownMemberIdError,
)

IN = TopicPartition("in", 0)


@pytest.fixture
def data(tmp_path):
    return read_process_write_data(tmp_path)


def member(data: str, **config) -> Consumer:
    c = Consumer(
        data,
        group_id="g",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=1000,
        heartbeat_interval_ms=100,
        **config,
    )
    c.subscribe(["in"])
    return c


def poll_until_owned(c: Consumer, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while IN not in c.assignment():
        assert time.monotonic() < deadline, "the member never got the partition"
        c.poll(timeout_ms=100)


def committed(data: str) -> int | None:
    with Consumer(data, group_id="g", enable_auto_commit=False) as c:
        return c.committed(IN)


def refused_then_aborted(data: str, meta, error: type[CommitFailedError]) -> None:
    """The zombie's offsets are refused with ``error``, its transaction cannot commit (nor send),
    abort works, and nothing of it is committed."""
    p = Producer(data, transactional_id="zombie")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"derived", partition=0)
    with pytest.raises(error):
        p.send_offsets_to_transaction({IN: 10}, meta)
    with pytest.raises(CommitFailedError):
        p.send("out", b"more", partition=0)
    with pytest.raises(CommitFailedError):
        p.commit_transaction()
    p.abort_transaction()
    assert committed(data) is None
    # The producer goes on: a transaction with the current member's metadata commits.
    p.close()


def commits_with(data: str, meta) -> None:
    p = Producer(data, transactional_id="current")
    p.init_transactions()
    p.begin_transaction()
    p.send_offsets_to_transaction({IN: 7}, meta)
    p.commit_transaction()
    p.close()
    assert committed(data) == 7


def test_a_member_evicted_in_a_rebalance_cannot_commit_offsets_in_a_transaction(data):
    zombie = member(data, max_poll_interval_ms=1000)
    poll_until_owned(zombie)
    stale = zombie.group_metadata()
    assert stale.generation_id >= 0 and stale.member_id
    # The zombie stops polling past max_poll_interval_ms; another member takes the partition.
    other = member(data)
    poll_until_owned(other)
    refused_then_aborted(data, stale, UnknownMemberIdError)
    commits_with(data, other.group_metadata())
    zombie.close()
    other.close()


def test_metadata_of_an_older_generation_is_refused(data):
    first = member(data)
    poll_until_owned(first)
    stale = first.group_metadata()
    second = member(data)
    second.poll(timeout_ms=100)  # joins: a new generation, while first is still a member
    assert second.group_metadata().generation_id > stale.generation_id
    refused_then_aborted(data, stale, IllegalGenerationError)
    first.close()
    second.close()


def test_a_static_member_replaced_by_its_instance_id_is_fenced(data):
    old = member(data, group_instance_id="i1")
    poll_until_owned(old)
    stale = old.group_metadata()
    assert stale.group_instance_id == "i1"
    new = member(data, group_instance_id="i1")
    poll_until_owned(new)
    refused_then_aborted(data, stale, FencedInstanceIdError)
    commits_with(data, new.group_metadata())
    new.close()
    old.close()


def test_a_generation_of_a_group_that_does_not_exist_is_refused_a_bare_group_id_is_not(data):
    from kafkalite.transactions.manager import ConsumerGroupMetadata

    refused_then_aborted(data, ConsumerGroupMetadata("g", 3, "m-1"), IllegalGenerationError)
    commits_with(data, "g")
