"""Adversarial cases of TxnOffsetCommit's member check (``Committer::check``,
``server/offset_commit.rs``) in `kafkalite serve`.

Kafka's group coordinator checks a TxnOffsetCommit and writes its offsets in one step of the
group's shard, so a commit it accepts is pending (OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT, KIP-447) before any later rebalance can hand the partition to a new
owner. A commit here waits between its check and its write (for the transactional id's
coordinator lock, up to 5 s; a transaction version 2 commit also records the offsets partition
in ``__transaction_state`` first): a member fenced meanwhile must be refused where the offsets
are written, as OffsetCommit is, or the new owner reads the old offset, finds nothing pending,
and the zombie's transaction commits over it.

Also: a commit of generation -1 naming a member id passes to a group without members, as on a
Kafka 4.1 broker (marker ``broker``)."""

from __future__ import annotations

import os
import time
import uuid

import kafkalite
import pytest
from consumer_group_wire import NONE, UNKNOWN_MEMBER_ID, TopicIds
from consumer_group_wire import Member as WireMember
from server_wire import HOLD_FLOCK, in_background, release, stop_holder

pytest.importorskip("kafka")
from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
from test_server_kip848_txn import TOPIC, Transactions, committed, offset_commit, retried, target  # noqa: F401

pytest_plugins = ["kafkalite.testing"]


def stable_offset(client: Transactions, group: str) -> tuple[int, int]:
    """TOPIC-0's (error code, committed offset) for ``group`` as a read_committed consumer asks
    (OffsetFetch v7, require_stable)."""
    request = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])],
        require_stable=True,
    )
    [topic] = client.call(request, 7, OffsetFetchResponse).topics
    [partition] = topic.partitions
    return partition.error_code, partition.committed_offset


def test_a_txn_offset_commit_whose_member_left_while_it_waited_is_refused_where_written(tmp_path, spawn):
    kafkalite.Admin(str(tmp_path)).create_topic(TOPIC, 1)
    group, zombie, heir, tid = "race-group", str(uuid.uuid4()), str(uuid.uuid4()), "race-tx"
    with kafkalite.Server(tmp_path) as server:
        wire = WireMember(server.address, TopicIds(server.address))
        txn, other = Transactions(server.address), Transactions(server.address)
        holder = None
        try:
            joined = wire.join(group, zombie, [TOPIC])
            assert joined["error"] == NONE, joined
            producer = txn.begin(tid)
            assert txn.add_offsets(tid, producer, group) == NONE
            # A stopped process holds the transactional id's coordinator lock: the commit is
            # checked (the member is the group's) and waits for the lock to write.
            lock_file = os.path.join(tmp_path, ".kafkalite-transactions", f"{tid}.lock")
            holder = stop_holder(spawn.code, HOLD_FLOCK, lock_file)
            thread, answer = in_background(
                txn.txn_offset_commit, tid, producer, group, zombie, joined["epoch"], 5
            )
            time.sleep(1.0)
            # Meanwhile the member is gone and another takes TOPIC-0: nothing is pending for it,
            # so it starts from the committed offset (none).
            assert wire.heartbeat(group, zombie, -1)["error"] == NONE
            assert wire.join(group, heir, [TOPIC])["error"] == NONE
            assert stable_offset(other, group) == (NONE, -1)
            release(holder)
            holder = None
            thread.join(30)
            assert "error" not in answer, answer
            assert answer["result"] == UNKNOWN_MEMBER_ID, (
                "a commit of a member that left before its offsets were written was accepted"
            )
            txn.commit(tid, producer)
            assert committed(other, group, -1) == -1, "the zombie's offset became the heir's"
        finally:
            if holder is not None:
                release(holder)
            wire.close()
            txn.close()
            other.close()


def test_a_commit_of_generation_minus_one_naming_a_member_passes_to_an_empty_group(target):  # noqa: F811
    """Kafka lets a commit of generation -1 into a group without members whatever member id it
    names (ClassicGroup / ConsumerGroup validateOffsetCommit): one the member that left still
    names, one to a group never seen; a Java producer's sendOffsetsToTransaction with the
    metadata of a consumer that left the group sends such a commit."""
    group, fresh, member, tid = "left-group", "never-seen-group", str(uuid.uuid4()), "left-tx"
    wire = WireMember(target.address, TopicIds(target.address))
    txn = Transactions(target.address)
    txn.find_coordinator(group, 0)
    txn.find_coordinator(fresh, 0)
    txn.find_coordinator(tid, 1)
    answers: list[dict] = []
    assert retried(lambda: answers.append(wire.join(group, member, [TOPIC])) or answers[-1]["error"]) == NONE
    assert wire.heartbeat(group, member, -1)["error"] == NONE
    producer = txn.begin(tid)
    assert txn.add_offsets(tid, producer, group) == NONE
    assert txn.add_offsets(tid, producer, fresh) == NONE
    codes = {
        "the member that left": txn.txn_offset_commit(tid, producer, group, member, -1, 4),
        "a group never seen": txn.txn_offset_commit(tid, producer, fresh, "someone", -1, 4),
    }
    assert codes == {"the member that left": NONE, "a group never seen": NONE}
    txn.commit(tid, producer)
    assert committed(txn, group, 4) == 4
    assert offset_commit(txn, group, member, -1, 6) == NONE
    assert committed(txn, group, 6) == 6
    wire.close()
    txn.close()
