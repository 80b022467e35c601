"""One authority over a group's committed offsets (issue 21, item 4): a commit from outside a
group (an ``assign()``ed consumer or an admin tool: generation -1, no member id) is refused
while the group has live members, embedded or network, as Kafka's group coordinator refuses it
(UNKNOWN_MEMBER_ID unless the group is empty), over the wire and on the embedded side alike. And
Kafka's internal topics cannot be created, deleted or grown by clients, over the wire
(CreateTopics: INVALID_REQUEST "Creation of internal topic ... is prohibited.") or through
``kafkalite.Admin`` (``InvalidTopicError``); their config can still be altered, as in Kafka."""

from __future__ import annotations

import logging
import os
import signal
import time

import kafkalite
import pytest
from kafkalite import CommitFailedError, InvalidTopicError, TopicPartition
from kafkalite.server import Server

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer  # noqa: E402
from kafka import TopicPartition as KafkaTP  # noqa: E402
from kafka.admin import NewPartitions, NewTopic  # noqa: E402
from kafka.errors import KafkaError  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

TOPIC = "orders"
RECORDS = 100

#: An embedded group member in a child process: consumes every record of TOPIC, commits, says
#: "committed <offset>" and stays alive (its member lock held) until killed.
MEMBER = """
import sys, time, kafkalite
c = kafkalite.Consumer(sys.argv[1], sys.argv[2], group_id=sys.argv[3], auto_offset_reset="earliest",
                       enable_auto_commit=False)
seen = 0
deadline = time.monotonic() + 30
while seen < int(sys.argv[4]) and time.monotonic() < deadline:
    seen += sum(len(v) for v in c.poll(timeout_ms=100).values())
c.commit()
print("committed", c.committed(kafkalite.TopicPartition(sys.argv[2], 0)), flush=True)
time.sleep(600)
"""


def fill(path: str, count: int = RECORDS) -> None:
    kafkalite.Admin(path).create_topic(TOPIC)
    with kafkalite.Producer(path) as producer:
        for i in range(count):
            producer.send(TOPIC, b"v%d" % i, partition=0)


def embedded_member(spawn, path: str, group: str):
    """A live embedded member (child process) that has consumed and committed everything."""
    import subprocess

    child = spawn.code(MEMBER, path, TOPIC, group, RECORDS, stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    assert line.split() == ["committed", str(RECORDS)], line
    return child


def outside_commit(server: Server, group: str, offset: int) -> None:
    """kafka-python with assign(): OffsetCommit with generation -1 and no member id."""
    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    try:
        consumer.assign([KafkaTP(TOPIC, 0)])
        consumer.commit({KafkaTP(TOPIC, 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()


def committed(path: str, group: str) -> int | None:
    consumer = kafkalite.Consumer(path, group_id=group)
    try:
        return consumer.committed(TopicPartition(TOPIC, 0))
    finally:
        consumer.close()


def test_a_network_commit_from_outside_is_refused_while_embedded_members_live_even_stopped(
    tmp_path, spawn, caplog
):
    """The finding: a client outside the group rewound a group whose embedded members owned the
    partitions, and the next member re-read 90 records. The member is SIGSTOPped while the
    commit comes (alive but silent: its lock still says alive), and the refusal is logged with
    the client's address. Once it is killed -9 the group is empty and the same commit is
    accepted, as Kafka accepts it for an empty group."""
    path = str(tmp_path)
    fill(path)
    member = embedded_member(spawn, path, "g")
    os.kill(member.pid, signal.SIGSTOP)
    with Server(path) as server, caplog.at_level(logging.WARNING, logger="kafkalite.server"):
        with pytest.raises(KafkaError):
            outside_commit(server, "g", 10)
        assert committed(path, "g") == RECORDS, "the refused commit rewound the group"
        refusals = [r.getMessage() for r in caplog.records if "refused OffsetCommit" in r.getMessage()]
        assert len(refusals) == 1, refusals
        assert "127.0.0.1" in refusals[0] and "UNKNOWN_MEMBER_ID" in refusals[0], refusals
        assert "embedded" in refusals[0], refusals

        # A member that joins next starts where the group was, not 90 records back.
        member.kill()
        member.wait()
        follower = kafkalite.Consumer(path, TOPIC, group_id="g", enable_auto_commit=False)
        try:
            got = sum(len(v) for v in follower.poll(timeout_ms=500).values())
            assert got == 0 and follower.position(TopicPartition(TOPIC, 0)) == RECORDS
        finally:
            follower.close()

        outside_commit(server, "g", 10)  # the group is empty now: Kafka accepts it
        assert committed(path, "g") == 10


def test_a_network_commit_from_outside_is_refused_while_network_members_live(tmp_path):
    """The coordinator's own members: the same rule (kept while the embedded side was added)."""
    path = str(tmp_path)
    fill(path)
    with Server(path) as server:
        member = KafkaConsumer(
            TOPIC,
            bootstrap_servers=server.bootstrap_servers,
            group_id="net",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        try:
            deadline = time.monotonic() + 30
            seen = 0
            while seen < RECORDS and time.monotonic() < deadline:
                seen += sum(len(v) for v in member.poll(timeout_ms=200).values())
            assert seen == RECORDS, f"the network member read {seen} of {RECORDS} records"
            member.commit()
            with pytest.raises(KafkaError):
                outside_commit(server, "net", 10)
            assert committed(path, "net") == RECORDS
        finally:
            member.close()


def test_an_embedded_assigned_consumer_cannot_commit_while_network_members_live(tmp_path):
    """The embedded side of the same rule: a ``kafkalite.Consumer`` with ``assign()`` was refused
    only while embedded members lived; the network members of a ``kafkalite serve`` count too
    (their server holds the group's claim)."""
    path = str(tmp_path)
    fill(path)
    with Server(path) as server:
        member = KafkaConsumer(
            TOPIC, bootstrap_servers=server.bootstrap_servers, group_id="net", enable_auto_commit=False
        )
        try:
            deadline = time.monotonic() + 60  # a join took over 30 s at load 12 (issue 23)
            while not member.assignment() and time.monotonic() < deadline:
                member.poll(timeout_ms=200)
            assert member.assignment()
            outsider = kafkalite.Consumer(path, group_id="net", enable_auto_commit=False)
            outsider.assign([TopicPartition(TOPIC, 0)])
            try:
                with pytest.raises(CommitFailedError, match="network members"):
                    outsider.commit({TopicPartition(TOPIC, 0): 42})
            finally:
                outsider.close()
            assert committed(path, "net") is None
        finally:
            member.close()
        # The group is empty once its member left: the embedded outsider may commit.
        deadline = time.monotonic() + 15
        while True:
            outsider = kafkalite.Consumer(path, group_id="net", enable_auto_commit=False)
            outsider.assign([TopicPartition(TOPIC, 0)])
            try:
                outsider.commit({TopicPartition(TOPIC, 0): 42})
                break
            except CommitFailedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
            finally:
                outsider.close()
        assert committed(path, "net") == 42


def creation_errors(server: Server, *topics: NewTopic) -> dict[str, tuple[int, str]]:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        response = admin.create_topics(list(topics), raise_errors=False)
        return {t["name"]: (t["error_code"], t["error_message"]) for t in response["topics"]}
    finally:
        admin.close()


def test_internal_topics_cannot_be_created_deleted_or_grown(tmp_path, caplog):
    """The finding: CreateTopics __consumer_offsets with 1 partition was accepted, after which
    every group commit failed (the group's partition, hash % 50, did not exist) and the topic
    could not be deleted. Now creating, deleting or adding partitions to an internal topic is
    refused over the wire and by ``kafkalite.Admin``; group commits then still work."""
    path = str(tmp_path)
    fill(path, 1)
    with Server(path) as server, caplog.at_level(logging.WARNING, logger="kafkalite.server"):
        errors = creation_errors(
            server, NewTopic("__consumer_offsets", 1, 1), NewTopic("__transaction_state", 1, 1)
        )
        for name in ("__consumer_offsets", "__transaction_state"):
            assert errors[name] == (42, f"Creation of internal topic {name} is prohibited."), errors
        assert sum("refused CreateTopics from" in r.getMessage() for r in caplog.records) == 2

        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            deleted = admin.delete_topics(["__transaction_state"], raise_errors=False)
            codes = {t["name"]: t["error_code"] for t in deleted["topics"]}
            assert codes == {"__transaction_state": 17}, codes  # INVALID_TOPIC_EXCEPTION
        finally:
            admin.close()

        outside_commit(server, "after", 1)  # creates __consumer_offsets itself, 50 partitions
        assert committed(path, "after") == 1
        assert len(kafkalite.Admin(path).describe_topic("__consumer_offsets").partitions) == 50

        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            grown = admin.create_partitions({"__consumer_offsets": NewPartitions(51)}, raise_errors=False)
            assert [t.error_code for t in grown.results] == [17], grown  # INVALID_TOPIC_EXCEPTION
        finally:
            admin.close()

    embedded = kafkalite.Admin(path)
    for name in ("__consumer_offsets", "__transaction_state"):
        with pytest.raises(InvalidTopicError, match="internal topic"):
            embedded.create_topic(name, 1)
    with pytest.raises(InvalidTopicError, match="internal topic"):
        embedded.create_partitions("__consumer_offsets", 51)
    assert "__transaction_state" not in embedded.list_topics()
    assert len(embedded.describe_topic("__consumer_offsets").partitions) == 50
    assert committed(path, "after") == 1
