"""Transactional offset commits of consumer-protocol (KIP-848) group members (issue 34 item 1),
on the wire, at the versions a Java 4.x producer sends (InitProducerId v5, AddOffsetsToTxn v4,
TxnOffsetCommit v5, EndTxn v5), built with kafka-python's protocol classes; the member itself
speaks ConsumerGroupHeartbeat v1 (tests/support/consumer_group_wire.py).

Kafka's group coordinator checks a TxnOffsetCommit to a consumer group by the member id and the
member epoch the request carries in generation_id (ConsumerGroup.validateOffsetCommit): a member
the group does not have is UNKNOWN_MEMBER_ID, an epoch that is not the member's is
ILLEGAL_GENERATION (the STALE_MEMBER_EPOCH of OffsetCommit v9, which TxnOffsetCommit's clients
do not know: OffsetMetadataManager.validateTransactionalOffsetCommit), so a zombie of a member
whose epoch a rebalance moved on, or of one that left, cannot commit; a transactional commit
naming no member (the producer's sendOffsetsToTransaction(offsets, groupId)) passes, and an
empty group takes an admin's OffsetCommit (no member id, epoch -1). The same checks against a
Kafka 4.1 broker (marker ``broker``) give the same codes and offsets. A group that embedded ``kafkalite.Consumer``s are
consuming refuses a transactional commit from outside it, as it refuses an OffsetCommit.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import kafkalite
import pytest
from consumer_group_wire import NONE, STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, TopicIds
from consumer_group_wire import Member as WireMember

pytest.importorskip("kafka")
from kafka.protocol.consumer.group import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from test_server_transactions_v2 import END_TXN_V2, Client

pytest_plugins = ["kafkalite.testing"]

ILLEGAL_GENERATION, UNSUPPORTED_VERSION = 22, 35
#: Retriable answers of a broker whose internal topics are still being created.
NOT_YET = {
    14,
    15,
    16,
    51,
}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
ADD_OFFSETS_V, TXN_OFFSET_COMMIT_V = 4, 5
TOPIC = "kip848-txn"


@dataclass
class Target:
    address: str


@pytest.fixture(params=["kafkalite", pytest.param("kafka", marks=pytest.mark.broker)])
def target(request, tmp_path) -> Iterator[Target]:
    """A `kafkalite serve` or a Kafka 4.1 broker, with TOPIC (one partition)."""
    if request.param == "kafkalite":
        kafkalite.Admin(str(tmp_path)).create_topic(TOPIC, 1)
        with kafkalite.Server(tmp_path) as server:
            yield Target(server.address)
        return
    import confluent_kafka.admin
    from kafka_broker import KafkaBroker

    with KafkaBroker(tmp_path / "logs", tmp_path / "work") as broker:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for created in admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, 1, 1)]).values():
            created.result(60)
        yield Target(broker.bootstrap_servers)


def retried(call):
    """``call()``'s error code, asked again while the coordinator is not ready yet."""
    deadline = time.monotonic() + 60
    while True:
        code = call()
        if code not in NOT_YET or time.monotonic() > deadline:
            return code
        time.sleep(0.3)


class Transactions(Client):
    """A transactional producer's coordinator requests for one transactional id."""

    def find_coordinator(self, key: str, key_type: int) -> None:
        """FindCoordinator v3 for a group (``key_type`` 0) or a transactional id (1), until it
        is answered (a broker creates __consumer_offsets, __transaction_state on the first one)."""
        request = FindCoordinatorRequest(key=key, key_type=key_type)
        assert retried(lambda: self.call(request, 3, FindCoordinatorResponse).error_code) == NONE

    def begin(self, tid: str) -> tuple[int, int]:
        got: dict = {}

        def init() -> int:
            got["error"], got["pid"], got["epoch"] = self.init_producer_id(tid)
            return got["error"]

        assert retried(init) == NONE
        return got["pid"], got["epoch"]

    def add_offsets(self, tid: str, producer: tuple[int, int], group: str) -> int:
        request = AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=producer[0], producer_epoch=producer[1], group_id=group
        )
        return retried(lambda: self.call(request, ADD_OFFSETS_V, AddOffsetsToTxnResponse).error_code)

    def txn_offset_commit(
        self, tid: str, producer: tuple[int, int], group: str, member: str, generation: int, offset: int
    ) -> int:
        """TxnOffsetCommit v5 of TOPIC-0 at ``offset``: the partition's code."""
        topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        request = TxnOffsetCommitRequest(
            transactional_id=tid, group_id=group, producer_id=producer[0], producer_epoch=producer[1],
            generation_id=generation, member_id=member, group_instance_id=None,
            topics=[topic(name=TOPIC, partitions=[topic.TxnOffsetCommitRequestPartition(**at(offset))])],
        )  # fmt: skip
        return partition_code(self, request, TXN_OFFSET_COMMIT_V, TxnOffsetCommitResponse)

    def commit(self, tid: str, producer: tuple[int, int]) -> None:
        assert retried(lambda: self.end_txn(tid, producer, True, version=END_TXN_V2)[0]) == NONE


def offset_commit(client: Client, group: str, member: str, epoch: int, offset: int, version: int = 9) -> int:
    """OffsetCommit of TOPIC-0 at ``offset``: the partition's code."""
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None,
        retention_time_ms=-1,
        topics=[topic(name=TOPIC, partitions=[topic.OffsetCommitRequestPartition(**at(offset))])],
    )  # fmt: skip
    return partition_code(client, request, version, OffsetCommitResponse)


def at(offset: int) -> dict:
    """A commit request's partition fields: TOPIC-0 at ``offset``."""
    return {
        "partition_index": 0,
        "committed_offset": offset,
        "committed_leader_epoch": -1,
        "committed_metadata": "",
    }


def partition_code(client: Client, request, version: int, response_class) -> int:
    """The error code of the one partition a commit request names."""
    [answered] = client.call(request, version, response_class).topics
    [partition] = answered.partitions
    return partition.error_code


def committed(client: Client, group: str, want: int) -> int:
    """TOPIC-0's committed offset of ``group`` (OffsetFetch v1), asked until it is ``want``
    (a broker writes a transaction's markers after EndTxn's answer) or 10 s passed."""
    request = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])],
    )
    deadline = time.monotonic() + 10
    while True:
        [topic] = client.call(request, 1, OffsetFetchResponse).topics
        [partition] = topic.partitions
        if partition.committed_offset == want or time.monotonic() > deadline:
            return partition.committed_offset
        time.sleep(0.1)


def next_epoch(wire: WireMember, group: str, member: str, epoch: int) -> int:
    """``member``'s epoch once its heartbeats (owning TOPIC-0) move it past ``epoch``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        answer = wire.heartbeat(group, member, epoch, owned={TOPIC: [0]})
        assert answer["error"] == NONE, answer
        if answer["epoch"] > epoch:
            return answer["epoch"]
        time.sleep(0.2)
    raise AssertionError(f"member {member}'s epoch stayed {epoch}")


def test_a_kip848_member_commits_offsets_in_a_transaction(target):
    group, member, tid = "kip848-txn-group", str(uuid.uuid4()), "kip848-txn"
    wire = WireMember(target.address, TopicIds(target.address))
    txn = Transactions(target.address)
    txn.find_coordinator(group, 0)
    txn.find_coordinator(tid, 1)
    answers: list[dict] = []
    # A broker's coordinator answers NOT_COORDINATOR until it has loaded its new partition.
    assert retried(lambda: answers.append(wire.join(group, member, [TOPIC])) or answers[-1]["error"]) == NONE
    joined = answers[-1]
    epoch = joined["epoch"]
    producer = txn.begin(tid)
    assert txn.add_offsets(tid, producer, group) == NONE
    assert txn.txn_offset_commit(tid, producer, group, member, epoch, 5) == NONE
    # Fenced or stale members: Kafka's codes. A commit naming no member is not checked.
    refusals = {
        "an unknown member": txn.txn_offset_commit(tid, producer, group, str(uuid.uuid4()), epoch, 7),
        "an older epoch": txn.txn_offset_commit(tid, producer, group, member, epoch - 1, 7),
        "a newer epoch": txn.txn_offset_commit(tid, producer, group, member, epoch + 1, 7),
        "no member": txn.txn_offset_commit(tid, producer, group, "", -1, 7),
    }
    assert refusals == {
        "an unknown member": UNKNOWN_MEMBER_ID,
        "an older epoch": ILLEGAL_GENERATION,
        "a newer epoch": ILLEGAL_GENERATION,
        "no member": NONE,
    }
    txn.commit(tid, producer)
    assert committed(txn, group, 7) == 7, "the member's commit, then the one naming no member"

    # OffsetCommit's own rules for the same member: v9+ only, STALE_MEMBER_EPOCH.
    assert offset_commit(txn, group, member, epoch, 6, version=8) == UNSUPPORTED_VERSION
    assert offset_commit(txn, group, member, epoch + 1, 6) == STALE_MEMBER_EPOCH
    assert offset_commit(txn, group, str(uuid.uuid4()), epoch, 6) == UNKNOWN_MEMBER_ID
    assert offset_commit(txn, group, "", -1, 6) == UNKNOWN_MEMBER_ID
    assert offset_commit(txn, group, member, epoch, 6) == NONE
    assert committed(txn, group, 6) == 6

    # A rebalance: B joins, A's epoch moves on; a zombie of A at its old epoch is refused, and so
    # is B once it left (a member the group no longer has).
    other = str(uuid.uuid4())
    assert wire.join(group, other, [TOPIC])["error"] == NONE
    newer = next_epoch(wire, group, member, epoch)
    producer = txn.begin(tid)
    assert txn.add_offsets(tid, producer, group) == NONE
    assert txn.txn_offset_commit(tid, producer, group, member, epoch, 8) == ILLEGAL_GENERATION
    assert offset_commit(txn, group, member, epoch, 8) == STALE_MEMBER_EPOCH
    assert wire.heartbeat(group, other, -1)["error"] == NONE
    assert txn.txn_offset_commit(tid, producer, group, other, 0, 8) == UNKNOWN_MEMBER_ID
    assert txn.txn_offset_commit(tid, producer, group, member, newer, 8) == NONE
    txn.commit(tid, producer)
    assert committed(txn, group, 8) == 8

    # Once the members left, the group is empty: an admin's commits (no member, epoch -1) pass,
    # transactional or not.
    assert wire.heartbeat(group, member, -1)["error"] == NONE
    producer = txn.begin(tid)
    assert txn.add_offsets(tid, producer, group) == NONE
    assert txn.txn_offset_commit(tid, producer, group, "", -1, 9) == NONE
    txn.commit(tid, producer)
    assert committed(txn, group, 9) == 9
    assert offset_commit(txn, group, "", -1, 11) == NONE
    assert committed(txn, group, 11) == 11
    wire.close()
    txn.close()


def test_a_transactional_commit_from_outside_a_group_embedded_consumers_consume_is_refused(tmp_path):
    """One authority per group: the embedded members cannot be named on the wire, so a commit
    naming no member may not rewind them, through a transaction either."""
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic(TOPIC, 1)
    group, tid = "embedded-txn-group", "embedded-txn"
    consumer = kafkalite.Consumer(path, TOPIC, group_id=group)
    consumer.poll(timeout_ms=500)
    try:
        with kafkalite.Server(path) as server:
            txn = Transactions(server.address)
            producer = txn.begin(tid)
            assert txn.add_offsets(tid, producer, group) == NONE
            assert txn.txn_offset_commit(tid, producer, group, "", -1, 3) == UNKNOWN_MEMBER_ID
            # Generation -1 naming a member id is from outside the group too.
            assert txn.txn_offset_commit(tid, producer, group, "someone", -1, 3) == UNKNOWN_MEMBER_ID
            assert offset_commit(txn, group, "someone", -1, 3) == UNKNOWN_MEMBER_ID
            txn.commit(tid, producer)
            assert committed(txn, group, -1) == -1
            txn.close()
    finally:
        consumer.close()
